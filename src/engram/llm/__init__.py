"""Chat models: the `ChatModel` protocol, the OpenAI-compatible and litellm clients, the response cache,
accounting and lenient JSON reading."""

from engram.llm.base import AsyncChatModel, ChatModel, Message
from engram.llm.client import ChatClient
from engram.llm.failures import LLMTimeoutError, LLMTruncatedError, LLMUnreachableError
from engram.llm.jsonparse import parse_json_object
from engram.llm.usage import LLMUsage

__all__ = [
    "AsyncChatModel",
    "ChatClient",
    "ChatModel",
    "LLMTimeoutError",
    "LLMTruncatedError",
    "LLMUnreachableError",
    "LLMUsage",
    "LiteLLMChat",
    "Message",
    "OpenAIChat",
    "parse_json_object",
]


def __getattr__(name: str) -> object:
    """The provider clients load their SDKs: import them only when asked for."""
    if name == "OpenAIChat":
        from engram.llm.openai_chat import OpenAIChat

        return OpenAIChat
    if name == "LiteLLMChat":
        from engram.llm.litellm_chat import LiteLLMChat

        return LiteLLMChat
    raise AttributeError(f"module 'engram.llm' has no attribute {name!r}")

"""Chat models: the `ChatModel` protocol, the OpenAI-compatible and litellm clients, the response cache,
accounting and lenient JSON reading."""

from engram.llm.base import AsyncChatModel, ChatModel, Message
from engram.llm.client import ChatClient
from engram.llm.failures import LLMTimeoutError, LLMTruncatedError, LLMUnreachableError
from engram.llm.jsonparse import parse_json_object
from engram.llm.litellm_chat import LiteLLMChat
from engram.llm.openai_chat import OpenAIChat
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

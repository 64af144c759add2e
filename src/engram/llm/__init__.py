"""Chat models: the `ChatModel` protocol, the OpenAI-compatible client and lenient JSON reading."""

from engram.llm.base import ChatModel, Message
from engram.llm.jsonparse import parse_json_object
from engram.llm.openai_chat import (
    LLMTimeoutError,
    LLMTruncatedError,
    LLMUnreachableError,
    LLMUsage,
    OpenAIChat,
)

__all__ = [
    "ChatModel",
    "LLMTimeoutError",
    "LLMTruncatedError",
    "LLMUnreachableError",
    "LLMUsage",
    "Message",
    "OpenAIChat",
    "parse_json_object",
]

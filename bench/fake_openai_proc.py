"""Run the fake OpenAI server in its own process (so its threads do not share the
benchmark's GIL) and print its URL on stdout; stops when stdin closes."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakes import reply  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402


def main() -> None:
    latency = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    with FakeOpenAIServer(latency_s=latency) as srv:
        srv.default = reply("pong", prompt_tokens=20, completion_tokens=2)
        print(srv.url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()

"""Drive mom-router through Envoy with the official Anthropic and OpenAI Python SDKs.

Usage: sdk_clients.py BASE_URL IDENTITY...
For each identity: an Anthropic Messages call (plain, streamed, and a tool-use round trip) and
an OpenAI Responses call (plain, streamed, and a function-call round trip), greedy. The SDKs
parse every answer into their own types (a shape they reject raises). Prints one JSON line per
case: {"identity", "case", "text", "stop"}. Installed by `./scripts/test.sh` (pinned SDKs).
"""
import json
import sys

import anthropic
import openai

PROMPT = "Name three primary colours."
# Greedy decoding, sent as a body field: the SDKs' own signatures differ across versions.
GREEDY = {"temperature": 0}
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


def emit(identity: str, case: str, text: str, stop) -> None:
    print(json.dumps({"identity": identity, "case": case, "text": text, "stop": stop}), flush=True)


def messages(client: anthropic.Anthropic, identity: str) -> None:
    ask = dict(model=identity, max_tokens=16, extra_body=GREEDY,
               messages=[{"role": "user", "content": PROMPT}])
    reply = client.messages.create(**ask)
    text = "".join(b.text for b in reply.content if b.type == "text")
    emit(identity, "messages", text, reply.stop_reason)
    with client.messages.stream(**ask) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    emit(identity, "messages-stream", streamed, final.stop_reason)
    tools = [{"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER}]
    history = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 21 C"}]},
    ]
    reply = client.messages.create(model=identity, max_tokens=16, extra_body=GREEDY, tools=tools,
                                   messages=history)
    text = "".join(b.text for b in reply.content if b.type == "text")
    emit(identity, "messages-tools", text, reply.stop_reason)


def responses(client: openai.OpenAI, identity: str) -> None:
    ask = dict(model=identity, max_output_tokens=16, extra_body=GREEDY, input=PROMPT)
    reply = client.responses.create(**ask)
    emit(identity, "responses", reply.output_text, reply.status)
    streamed, final = "", None
    for event in client.responses.create(stream=True, **ask):
        if event.type == "response.output_text.delta":
            streamed += event.delta
        elif event.type in ("response.completed", "response.incomplete"):
            final = event.response
    if final is None or final.output_text != streamed:
        raise SystemExit(f"{identity}: the completed response does not hold the streamed text")
    emit(identity, "responses-stream", streamed, final.status)
    tools = [{"type": "function", "name": "get_weather", "description": "Weather in a city",
              "parameters": WEATHER}]
    history = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather",
         "arguments": json.dumps({"city": "Paris"})},
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 21 C"},
    ]
    reply = client.responses.create(model=identity, max_output_tokens=16, extra_body=GREEDY,
                                    tools=tools, input=history)
    emit(identity, "responses-tools", reply.output_text, reply.status)


def main() -> None:
    base, identities = sys.argv[1], sys.argv[2:]
    claude = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0, timeout=60)
    oai = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
    for identity in identities:
        messages(claude, identity)
        responses(oai, identity)


if __name__ == "__main__":
    main()

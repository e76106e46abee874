"""Normalization shared by several formats: what a field, a usage object, a message or a
response stream means, decided once.

* `fields` -- numbers, times, ids and JSON-in-strings as every format reads them;
* `usage` -- provider usage objects (Anthropic, OpenAI Chat / Responses) -> `Usage`;
* `streams` -- a logged provider response, JSON or an SSE stream, -> usage and output;
* `sessions` -- session keys of agent trajectories (one file or run = one session);
* `messages` -- OpenTelemetry GenAI ``{role, parts}`` messages -> OpenAI Chat messages.

A format module keeps what only its source does; anything a second format needs
moves here, so two formats never answer the same question differently.
"""

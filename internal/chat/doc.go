// Package chat renders Hugging Face chat templates (Jinja) into prompt text.
//
// Templates are compiled and executed by github.com/ardanlabs/jinja; this package only adapts
// kvasir's message types into the plain values a template sees under transformers
// (messages as dicts, tools as OpenAI-shaped dicts, bos_token, eos_token,
// add_generation_prompt, extra keyword arguments) and supplies the globals whose behaviour
// depends on the request, such as strftime_now with an injectable clock.
//
// Every render counts its loop iterations and macro depth and caps its output (Limits). A
// template that may be hostile renders in a Sandbox: worker processes (this binary
// re-executed, see ServeWorkerIfAsked) with a stack limit, a memory limit and a deadline,
// since a goroutine can be neither stopped nor saved from a stack overflow.
package chat

// Package chat renders Hugging Face chat templates (Jinja) into prompt text.
//
// Templates are compiled and executed by github.com/ardanlabs/jinja; this package only adapts
// kvasir's message types into the plain values a template sees under transformers
// (messages as dicts, tools as OpenAI-shaped dicts, bos_token, eos_token,
// add_generation_prompt, extra keyword arguments) and supplies the globals whose behaviour
// depends on the request, such as strftime_now with an injectable clock.
package chat

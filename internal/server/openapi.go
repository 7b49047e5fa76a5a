package server

import "net/http"

// endpoint is one operation /openapi.json lists.
type endpoint struct {
	path, method, summary, tag string
}

// endpoints are the server's operations, as /openapi.json describes them.
var endpoints = []endpoint{
	{"/v1/models", "get", "List the served models", "OpenAI"},
	{"/v1/models/{model}", "get", "Retrieve a served model", "OpenAI"},
	{"/v1/completions", "post", "Create a completion (text or token-id prompts; SSE streaming)", "OpenAI"},
	{"/v1/chat/completions", "post", "Create a chat completion (tools, structured outputs; SSE streaming)", "OpenAI"},
	{"/v1/load_lora_adapter", "post", "Load a LoRA adapter: {lora_name, lora_path} (vLLM)", "vLLM"},
	{"/v1/unload_lora_adapter", "post", "Unload a LoRA adapter: {lora_name} (vLLM)", "vLLM"},
	{"/tokenize", "post", "Tokenize a prompt or chat messages (vLLM)", "vLLM"},
	{"/detokenize", "post", "Turn token ids into text (vLLM)", "vLLM"},
	{"/health", "get", "Health: 200 {\"status\":\"ok\"} while serving, 503 while shutting down", "Server"},
	{"/version", "get", "The server's version", "Server"},
	{"/metrics", "get", "Prometheus metrics (vLLM's names under kvasir:)", "Server"},
	{"/openapi.json", "get", "This document", "Server"},
	{"/api/tags", "get", "List the served models (ollama)", "ollama"},
	{"/api/ps", "get", "List the loaded models (ollama)", "ollama"},
	{"/api/show", "post", "Show a model's details and template (ollama)", "ollama"},
	{"/api/version", "get", "The server's version (ollama)", "ollama"},
	{"/api/generate", "post", "Generate from a prompt (ollama; NDJSON streaming)", "ollama"},
	{"/api/chat", "post", "Chat (ollama; NDJSON streaming)", "ollama"},
	{"/api/embed", "post", "Embeddings (ollama), of an encoder model", "ollama"},
	{"/api/embeddings", "post", "Embeddings, older name and shape (ollama), of an encoder model", "ollama"},
	{"/completion", "post", "Complete a prompt (llama-server; SSE streaming)", "llama.cpp"},
	{"/props", "get", "Server properties and default generation settings (llama-server)", "llama.cpp"},
}

// handleOpenAPI answers GET /openapi.json: an OpenAPI 3 document listing the endpoints
// (their request and response bodies are those of the APIs they follow, described in
// docs/API.md).
func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	paths := map[string]map[string]any{}
	for _, e := range endpoints {
		if paths[e.path] == nil {
			paths[e.path] = map[string]any{}
		}
		op := map[string]any{"summary": e.summary, "tags": []string{e.tag},
			"responses": map[string]any{"200": map[string]any{"description": "OK"}}}
		if e.method == "post" {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}}
		}
		paths[e.path][e.method] = op
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"openapi": "3.1.0",
		"info":    map[string]any{"title": "kvasir", "version": s.cfg.Version, "description": "OpenAI-, vLLM-, ollama- and llama-server-compatible API of kvasir serve"},
		"paths":   paths,
	})
}

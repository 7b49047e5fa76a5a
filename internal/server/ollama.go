package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir"
)

// This file serves ollama's API (/api/*), so that Open WebUI, Continue and the ollama
// clients work unchanged: a request is read in ollama's shape, turned into the OpenAI
// request it means (its options mapped to kvasir's sampling), validated and run as that
// request is, and answered in ollama's shape, streaming newline-delimited JSON by default.

// ollamaOptions are the options of an ollama request that kvasir maps to its sampling;
// others (num_ctx, num_thread, mirostat, ...) are ignored with a warning, as they tune
// ollama's runner rather than the request.
type ollamaOptions struct {
	NumPredict       *int     `json:"num_predict"`
	Temperature      *float64 `json:"temperature"`
	TopK             *int     `json:"top_k"`
	TopP             *float64 `json:"top_p"`
	MinP             *float64 `json:"min_p"`
	Seed             *int64   `json:"seed"`
	Stop             stopList `json:"stop"`
	RepeatPenalty    *float64 `json:"repeat_penalty"`
	PresencePenalty  *float64 `json:"presence_penalty"`
	FrequencyPenalty *float64 `json:"frequency_penalty"`
}

// ollamaCommon holds the fields /api/generate and /api/chat share.
type ollamaCommon struct {
	Model     string          `json:"model"`
	Stream    *bool           `json:"stream"`
	Format    json.RawMessage `json:"format"`
	Options   json.RawMessage `json:"options"`
	KeepAlive json.RawMessage `json:"keep_alive"`
	Think     json.RawMessage `json:"think"`
}

// ollamaGenerateRequest is the body of POST /api/generate.
type ollamaGenerateRequest struct {
	ollamaCommon
	Prompt  string   `json:"prompt"`
	System  string   `json:"system"`
	Raw     bool     `json:"raw"`
	Suffix  string   `json:"suffix"`
	Images  []string `json:"images"`
	Context []int32  `json:"context"`
}

// ollamaMessage is a message of /api/chat.
type ollamaMessage struct {
	Role      string           `json:"role"`
	Content   string           `json:"content"`
	Images    []string         `json:"images,omitempty"`
	ToolCalls []ollamaToolCall `json:"tool_calls,omitempty"`
}

// ollamaToolCall is a tool call of an assistant message: its arguments an object, not a
// string as in OpenAI's API.
type ollamaToolCall struct {
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// ollamaChatRequest is the body of POST /api/chat.
type ollamaChatRequest struct {
	ollamaCommon
	Messages []ollamaMessage   `json:"messages"`
	Tools    []json.RawMessage `json:"tools"`
}

// ollamaError answers an ollama request with ollama's error body, {"error": "..."}.
func ollamaError(w http.ResponseWriter, e *APIError) {
	writeJSON(w, e.Status, map[string]string{"error": e.Message})
}

// ollamaRead decodes an ollama request body into dst and checks its model; on failure it
// answers the client and returns false. Unknown fields are logged, not refused: ollama
// clients send fields kvasir has no use for (keep_alive, say).
func (s *Server) ollamaRead(w http.ResponseWriter, r *http.Request, dst any, model func() string) bool {
	unknown, apiErr := decodeBody(w, r, s.cfg.MaxBodyBytes, dst)
	if apiErr == nil {
		s.warnUnknown(r.URL.Path, unknown)
		apiErr = s.checkOllamaModel(model())
	}
	if apiErr != nil {
		ollamaError(w, apiErr)
		return false
	}
	return true
}

// checkOllamaModel accepts an empty model, a served name, or a served name with ollama's
// ":latest" tag.
func (s *Server) checkOllamaModel(name string) *APIError {
	if apiErr := s.checkModel(strings.TrimSuffix(name, ":latest")); apiErr != nil {
		return notFound("model", "model_not_found", "model %q not found: this server serves %s", name, strings.Join(s.cfg.ModelNames, ", "))
	}
	return nil
}

// ollamaCommonRequest turns the shared fields of an ollama request into the OpenAI request
// fields they mean (path names the endpoint in the log of ignored options).
func (s *Server) ollamaCommonRequest(path string, o *ollamaCommon) (commonRequest, *APIError) {
	c := commonRequest{limits: &s.cfg.Limits, Stream: o.Stream == nil || *o.Stream}
	if len(o.Options) > 0 && string(o.Options) != "null" {
		var opts ollamaOptions
		unknown, apiErr := decodeJSON(o.Options, &opts)
		if apiErr != nil {
			apiErr.Message = "options: " + apiErr.Message
			return c, apiErr
		}
		s.warnUnknown(path+" options", unknown)
		if opts.NumPredict != nil && *opts.NumPredict > 0 {
			// -1 (no limit) and -2 (fill the context) both mean the rest of the context.
			c.MaxTokens = opts.NumPredict
		}
		c.Temperature, c.TopK, c.TopP, c.MinP, c.Seed = opts.Temperature, opts.TopK, opts.TopP, opts.MinP, opts.Seed
		c.Stop, c.RepetitionPenalty = opts.Stop, opts.RepeatPenalty
		c.PresencePenalty, c.FrequencyPenalty = opts.PresencePenalty, opts.FrequencyPenalty
	}
	switch f := strings.TrimSpace(string(o.Format)); {
	case f == "" || f == "null" || f == `""`:
	case f == `"json"`:
		c.ResponseFormat = &responseFormat{Type: "json_object"}
	case strings.HasPrefix(f, "{"):
		c.ResponseFormat = &responseFormat{Type: "json_schema", JSONSchema: &struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		}{Name: "format", Schema: o.Format}}
	default:
		return c, badRequest("format", "format must be \"json\" or a JSON Schema object, got %.100s", f)
	}
	return c, nil
}

// ollamaTimes are the timestamps of an ollama generation, for its durations.
type ollamaTimes struct {
	start, first time.Time
}

// ollamaFinal is what the last object of an ollama answer carries besides the text.
type ollamaFinal struct {
	Done               bool    `json:"done"`
	DoneReason         string  `json:"done_reason,omitempty"`
	Context            []int32 `json:"context,omitempty"`
	TotalDuration      int64   `json:"total_duration,omitempty"`
	LoadDuration       int64   `json:"load_duration,omitempty"`
	PromptEvalCount    int     `json:"prompt_eval_count,omitempty"`
	PromptEvalDuration int64   `json:"prompt_eval_duration,omitempty"`
	EvalCount          int     `json:"eval_count,omitempty"`
	EvalDuration       int64   `json:"eval_duration,omitempty"`
}

// final makes the counts and durations (nanoseconds) of a finished generation.
func (t *ollamaTimes) final(reason string, u kvasir.Usage) ollamaFinal {
	now := time.Now()
	first := t.first
	if first.IsZero() {
		first = now
	}
	if reason == kvasir.FinishAbort || reason == "" {
		reason = "stop"
	}
	return ollamaFinal{Done: true, DoneReason: reason, TotalDuration: now.Sub(t.start).Nanoseconds(),
		PromptEvalCount: u.PromptTokens, PromptEvalDuration: first.Sub(t.start).Nanoseconds(),
		EvalCount: u.CompletionTokens, EvalDuration: now.Sub(first).Nanoseconds()}
}

// ollamaGenerateChunk is an object of /api/generate's answer.
type ollamaGenerateChunk struct {
	Model     string `json:"model"`
	CreatedAt string `json:"created_at"`
	Response  string `json:"response"`
	ollamaFinal
}

// ollamaChatChunk is an object of /api/chat's answer.
type ollamaChatChunk struct {
	Model     string        `json:"model"`
	CreatedAt string        `json:"created_at"`
	Message   ollamaMessage `json:"message"`
	ollamaFinal
}

// createdAt is ollama's timestamp of an answer object.
func createdAt() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// handleOllamaGenerate answers POST /api/generate: the prompt rendered with the chat
// template as a user message (with the system message, when given) unless raw is set or
// the model has no template; an empty prompt only "loads" the model, as in ollama.
func (s *Server) handleOllamaGenerate(w http.ResponseWriter, r *http.Request) {
	var req ollamaGenerateRequest
	if !s.ollamaRead(w, r, &req, func() string { return req.Model }) {
		return
	}
	model := s.ollamaName(req.Model)
	if req.Prompt == "" && req.System == "" {
		writeJSON(w, http.StatusOK, ollamaGenerateChunk{Model: model, CreatedAt: createdAt(), ollamaFinal: ollamaFinal{Done: true, DoneReason: "load"}})
		return
	}
	for _, unsupported := range []struct {
		set  bool
		what string
	}{{len(req.Images) > 0, "images: this server serves a text model"}, {req.Suffix != "", "suffix is not supported yet (text after the insertion point)"},
		{len(req.Context) > 0, "context (the tokens of an earlier answer) is not supported: send the conversation to /api/chat"}} {
		if unsupported.set {
			ollamaError(w, badRequest("", "%s", unsupported.what))
			return
		}
	}
	c, apiErr := s.ollamaCommonRequest(r.URL.Path, &req.ollamaCommon)
	if apiErr != nil {
		ollamaError(w, apiErr)
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	var kreq kvasir.Request
	if req.Raw || s.tmpl == nil {
		prompt := req.Prompt
		if req.System != "" {
			prompt = req.System + "\n\n" + prompt
		}
		cr := completionRequest{commonRequest: c, Prompt: promptInput{{Text: prompt, IsText: true}}, restOfContext: true}
		reqs, apiErr := s.completionRequests(&cr)
		if apiErr != nil {
			ollamaError(w, apiErr)
			return
		}
		kreq = reqs[0]
	} else {
		var msgs []ollamaMessage
		if req.System != "" {
			msgs = append(msgs, ollamaMessage{Role: "system", Content: req.System})
		}
		msgs = append(msgs, ollamaMessage{Role: "user", Content: req.Prompt})
		var apiErr *APIError
		if kreq, _, apiErr = s.ollamaChatRequest(ctx, c, msgs, nil); apiErr != nil {
			ollamaError(w, apiErr)
			return
		}
	}
	times := ollamaTimes{start: time.Now()}
	ch, apiErr := s.submit(ctx, newID("ollama-"), []kvasir.Request{kreq}, "prompt")
	if apiErr != nil {
		ollamaError(w, apiErr)
		return
	}
	chunk := func(text string) any {
		return ollamaGenerateChunk{Model: model, CreatedAt: createdAt(), Response: text}
	}
	last := func(text string, f ollamaFinal) any {
		f.Context = kreq.PromptTokens
		return ollamaGenerateChunk{Model: model, CreatedAt: createdAt(), Response: text, ollamaFinal: f}
	}
	s.ollamaAnswer(w, ch, c.Stream, &times, chunk, last)
}

// ollamaName is the model name an answer reports: the one asked for, or the served one.
func (s *Server) ollamaName(asked string) string {
	if asked != "" {
		return asked
	}
	return s.modelName()
}

// ollamaChatRequest makes the engine request of an ollama conversation, through the OpenAI
// chat request it means.
func (s *Server) ollamaChatRequest(ctx context.Context, c commonRequest, msgs []ollamaMessage, tools []json.RawMessage) (kvasir.Request, *toolRequest, *APIError) {
	req := chatRequest{commonRequest: c, Tools: tools}
	for i, m := range msgs {
		if len(m.Images) > 0 {
			return kvasir.Request{}, nil, badRequest(fmt.Sprintf("messages[%d].images", i), "images: this server serves a text model")
		}
		content, _ := json.Marshal(m.Content)
		cm := chatMessage{Role: m.Role, Content: content}
		for j, tc := range m.ToolCalls {
			var call toolCall
			call.ID, call.Type, call.Function.Name = fmt.Sprintf("call_%d_%d", i, j), "function", tc.Function.Name
			call.Function.Arguments = string(tc.Function.Arguments)
			cm.ToolCalls = append(cm.ToolCalls, call)
		}
		req.Messages = append(req.Messages, cm)
	}
	if len(req.Messages) == 0 {
		return kvasir.Request{}, nil, badRequest("messages", "messages is required")
	}
	return s.chatRequest(ctx, &req)
}

// handleOllamaChat answers POST /api/chat.
func (s *Server) handleOllamaChat(w http.ResponseWriter, r *http.Request) {
	var req ollamaChatRequest
	if !s.ollamaRead(w, r, &req, func() string { return req.Model }) {
		return
	}
	model := s.ollamaName(req.Model)
	if len(req.Messages) == 0 {
		writeJSON(w, http.StatusOK, ollamaChatChunk{Model: model, CreatedAt: createdAt(), Message: ollamaMessage{Role: "assistant"},
			ollamaFinal: ollamaFinal{Done: true, DoneReason: "load"}})
		return
	}
	c, apiErr := s.ollamaCommonRequest(r.URL.Path, &req.ollamaCommon)
	if apiErr != nil {
		ollamaError(w, apiErr)
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	kreq, tools, apiErr := s.ollamaChatRequest(ctx, c, req.Messages, req.Tools)
	if apiErr != nil {
		ollamaError(w, apiErr)
		return
	}
	times := ollamaTimes{start: time.Now()}
	ch, apiErr := s.submit(ctx, newID("ollama-"), []kvasir.Request{kreq}, "messages")
	if apiErr != nil {
		ollamaError(w, apiErr)
		return
	}
	reply := func(text string) ollamaMessage { return ollamaMessage{Role: "assistant", Content: text} }
	chunk := func(text string) any {
		return ollamaChatChunk{Model: model, CreatedAt: createdAt(), Message: reply(text)}
	}
	last := func(text string, f ollamaFinal) any {
		m := reply(text)
		if tools != nil {
			// With tools the reply is parsed whole (its text was held back): content and
			// calls, the arguments as objects.
			out := replyMessage(text, tools)
			m.Content = out.text()
			for _, tc := range out.ToolCalls {
				var call ollamaToolCall
				call.Function.Name, call.Function.Arguments = tc.Function.Name, json.RawMessage(tc.Function.Arguments)
				if !json.Valid(call.Function.Arguments) {
					call.Function.Arguments, _ = json.Marshal(tc.Function.Arguments)
				}
				m.ToolCalls = append(m.ToolCalls, call)
			}
		}
		return ollamaChatChunk{Model: model, CreatedAt: createdAt(), Message: m, ollamaFinal: f}
	}
	if tools != nil {
		// Tool-call syntax must not leak out as text: the answer comes whole at the end.
		chunk = func(string) any { return nil }
	}
	s.ollamaAnswer(w, ch, c.Stream, &times, chunk, last)
}

// ollamaAnswer reads a one-choice generation and answers it: streamed, one object per
// output (chunk's; nil: held back) and a last one with the counts (last's); or whole, last's
// object with all the text.
func (s *Server) ollamaAnswer(w http.ResponseWriter, ch <-chan item, stream bool, times *ollamaTimes,
	chunk func(string) any, last func(string, ollamaFinal) any) {
	var text, held strings.Builder
	var st *sseWriter
	if stream {
		st = newNDJSON(w, int(s.cfg.MaxStreamBuffer))
		defer st.close()
	}
	var usage kvasir.Usage
	for it := range ch {
		o := it.Out
		if o.Err != nil {
			s.log.Error("ollama generation failed", "err", o.Err)
			if st != nil {
				st.send(map[string]string{"error": o.Err.Error()})
				return
			}
			ollamaError(w, internalError(o.Err))
			return
		}
		if times.first.IsZero() && len(o.TokenIDs) > 0 {
			times.first = time.Now()
		}
		usage = o.Usage
		if o.FinishReason != "" {
			f := times.final(o.FinishReason, usage)
			if st == nil {
				text.WriteString(o.Text)
				writeJSON(w, http.StatusOK, last(text.String(), f))
				return
			}
			held.WriteString(o.Text)
			final := last(held.String(), f)
			st.send(final)
			return
		}
		if st == nil {
			text.WriteString(o.Text)
			continue
		}
		if o.Text == "" {
			continue
		}
		if c := chunk(o.Text); c != nil {
			if !st.send(c) {
				return
			}
		} else {
			held.WriteString(o.Text)
		}
	}
	// The client went away (the request's context ended) before the end.
}

// ollamaDetails is the details object of a model in /api/tags and /api/show.
type ollamaDetails struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

// ollamaDetails describes the served model.
func (s *Server) ollamaDetails() ollamaDetails {
	fm := s.eng.Loaded().File()
	format := "safetensors"
	if strings.HasSuffix(strings.ToLower(fm.Path), ".gguf") {
		format = "gguf"
	}
	quant := ""
	if t, ok := fm.Tensor("blk.0.attn_q.weight"); ok {
		quant = t.Type.String()
	}
	return ollamaDetails{Format: format, Family: fm.Config.Arch, Families: []string{fm.Config.Arch},
		ParameterSize: parameterSize(fm.ParamCount()), QuantizationLevel: quant}
}

// parameterSize writes a parameter count as ollama does: 135M, 8.0B.
func parameterSize(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.0fM", float64(n)/1e6)
	}
	return fmt.Sprint(n)
}

// handleOllamaTags answers GET /api/tags: the served names, as local models.
func (s *Server) handleOllamaTags(w http.ResponseWriter, r *http.Request) {
	type tag struct {
		Name       string        `json:"name"`
		Model      string        `json:"model"`
		ModifiedAt string        `json:"modified_at"`
		Size       int64         `json:"size"`
		Digest     string        `json:"digest"`
		Details    ollamaDetails `json:"details"`
	}
	fm := s.eng.Loaded().File()
	sum := sha256.Sum256([]byte(fm.Path))
	list := struct {
		Models []tag `json:"models"`
	}{Models: []tag{}}
	for _, n := range s.cfg.ModelNames {
		list.Models = append(list.Models, tag{Name: n, Model: n, ModifiedAt: time.Unix(s.created, 0).UTC().Format(time.RFC3339),
			Size: fm.Bytes(), Digest: hex.EncodeToString(sum[:]), Details: s.ollamaDetails()})
	}
	writeJSON(w, http.StatusOK, list)
}

// handleOllamaShow answers POST /api/show: the model's details, template and sizes.
func (s *Server) handleOllamaShow(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model   string `json:"model"`
		Name    string `json:"name"` // older clients
		Verbose bool   `json:"verbose"`
	}
	if !s.ollamaRead(w, r, &req, func() string {
		if req.Model == "" {
			return req.Name
		}
		return req.Model
	}) {
		return
	}
	fm := s.eng.Loaded().File()
	arch := fm.Config.Arch
	tmpl := s.cfg.ChatTemplate
	if tmpl == "" {
		tmpl = s.eng.ChatTemplate()
	}
	caps := []string{"completion"}
	if s.toolParser != "" {
		caps = append(caps, "tools")
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"modelfile":  "# served by kvasir from " + filepath.Base(fm.Path),
		"parameters": "",
		"template":   tmpl,
		"details":    s.ollamaDetails(),
		"model_info": map[string]any{
			"general.architecture":     arch,
			"general.parameter_count":  fm.ParamCount(),
			arch + ".context_length":   s.eng.MaxModelLen(),
			arch + ".embedding_length": fm.Config.Dim,
			arch + ".block_count":      fm.Config.Layers,
		},
		"capabilities": caps,
		"modified_at":  time.Unix(s.created, 0).UTC().Format(time.RFC3339),
	})
}

// handleOllamaVersion answers GET /api/version with kvasir's version.
func (s *Server) handleOllamaVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": s.cfg.Version})
}

// ollamaEmbedRequest is the body of ollama's /api/embed (input: a text or a list of them)
// and of its older /api/embeddings (prompt: one text).
type ollamaEmbedRequest struct {
	Model      string          `json:"model"`
	Input      json.RawMessage `json:"input"`
	Prompt     *string         `json:"prompt"`
	Truncate   *bool           `json:"truncate"`
	Dimensions *int            `json:"dimensions"`
}

// handleOllamaEmbed answers POST /api/embed, {"embeddings": [[...], ...]} L2-normalized as
// ollama's are, and the older POST /api/embeddings, {"embedding": [...]} as the model gives
// it, with an encoder model's Embedder; a generative model's server answers 400. truncate
// (default true, as ollama) cuts a text too long for the model to its maximum length; with
// false such a text is a 400.
func (s *Server) handleOllamaEmbed(w http.ResponseWriter, r *http.Request) {
	var req ollamaEmbedRequest
	if !s.ollamaRead(w, r, &req, func() string { return req.Model }) {
		return
	}
	emb, apiErr := s.embedder("model")
	if apiErr != nil {
		ollamaError(w, apiErr)
		return
	}
	legacy := r.URL.Path == "/api/embeddings"
	raw := req.Input
	if legacy {
		if req.Prompt == nil {
			ollamaError(w, badRequest("prompt", "prompt is required"))
			return
		}
		raw, _ = json.Marshal(*req.Prompt)
	}
	if len(raw) == 0 {
		ollamaError(w, badRequest("input", "input is required: a text or a list of texts"))
		return
	}
	dims, apiErr := embeddingDims(emb, req.Dimensions)
	if apiErr != nil {
		ollamaError(w, apiErr)
		return
	}
	limit := emb.MaxLen()
	if req.Truncate != nil && !*req.Truncate {
		limit = 0
	}
	start := time.Now()
	inputs, apiErr := s.embeddingInputs(emb, raw, limit)
	if apiErr != nil {
		ollamaError(w, apiErr)
		return
	}
	vecs, err := emb.Embed(r.Context(), inputs)
	if err != nil {
		ollamaError(w, embedError(r.Context(), err, "input"))
		return
	}
	if legacy {
		writeJSON(w, http.StatusOK, map[string]any{"embedding": vecs[0][:dims]})
		return
	}
	tokens := 0
	out := make([][]float32, len(vecs))
	for i, v := range vecs {
		out[i] = unitLength(v[:dims])
		tokens += len(inputs[i].Tokens)
	}
	writeJSON(w, http.StatusOK, map[string]any{"model": s.modelName(), "embeddings": out,
		"total_duration": time.Since(start).Nanoseconds(), "load_duration": 0, "prompt_eval_count": tokens})
}

// handleOllamaPS answers GET /api/ps: the served model, always loaded.
func (s *Server) handleOllamaPS(w http.ResponseWriter, r *http.Request) {
	fm := s.eng.Loaded().File()
	type running struct {
		Name      string        `json:"name"`
		Model     string        `json:"model"`
		Size      int64         `json:"size"`
		Details   ollamaDetails `json:"details"`
		ExpiresAt string        `json:"expires_at"`
	}
	list := struct {
		Models []running `json:"models"`
	}{}
	list.Models = append(list.Models, running{Name: s.modelName(), Model: s.modelName(), Size: fm.Bytes(), Details: s.ollamaDetails(),
		ExpiresAt: time.Now().Add(100 * 365 * 24 * time.Hour).UTC().Format(time.RFC3339)})
	writeJSON(w, http.StatusOK, list)
}

// ollamaRoutes registers ollama's endpoints on mux.
func (s *Server) ollamaRoutes(mux *http.ServeMux) {
	mux.Handle("/api/tags", method(http.MethodGet, s.handleOllamaTags))
	mux.Handle("/api/ps", method(http.MethodGet, s.handleOllamaPS))
	mux.Handle("/api/show", method(http.MethodPost, s.handleOllamaShow))
	mux.Handle("/api/version", method(http.MethodGet, s.handleOllamaVersion))
	mux.Handle("/api/generate", method(http.MethodPost, s.handleOllamaGenerate))
	mux.Handle("/api/chat", method(http.MethodPost, s.handleOllamaChat))
	mux.Handle("/api/embed", method(http.MethodPost, s.handleOllamaEmbed))
	mux.Handle("/api/embeddings", method(http.MethodPost, s.handleOllamaEmbed))
}

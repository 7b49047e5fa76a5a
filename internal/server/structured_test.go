package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
)

// structuredSchema is a small closed schema whose instances are short: {"a":D,"b":"yes"|"no"}.
const structuredSchema = `{"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":9},"b":{"enum":["yes","no"]}},"required":["a","b"],"additionalProperties":false}`

// checkSchemaInstance reports whether s is an instance of structuredSchema.
func checkSchemaInstance(s string) error {
	var v struct {
		A *int    `json:"a"`
		B *string `json:"b"`
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	if v.A == nil || *v.A < 0 || *v.A > 9 || v.B == nil || (*v.B != "yes" && *v.B != "no") {
		return fmt.Errorf("not an instance: %q", s)
	}
	return nil
}

// TestStructuredOutputFields: every request field that constrains the output (OpenAI's
// response_format, vLLM's structured_outputs and guided_*, llama.cpp's grammar and
// json_schema) holds a random model sampled at temperature 1 to its language, in chat and
// completions, streamed and not, and a finished grammar ends the choice with "stop".
func TestStructuredOutputFields(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	schema := json.RawMessage(structuredSchema)
	isSchema := func(s string) error { return checkSchemaInstance(s) }
	codeRe := regexp.MustCompile(`^[A-Z]{3}-[0-9]{2}$`)
	isCode := func(s string) error {
		if !codeRe.MatchString(s) {
			return fmt.Errorf("%q does not match", s)
		}
		return nil
	}
	isChoice := func(s string) error {
		if !slices.Contains([]string{"red", "green", "blue"}, s) {
			return fmt.Errorf("%q is not a choice", s)
		}
		return nil
	}
	isObject := func(s string) error {
		var m map[string]any
		return json.Unmarshal([]byte(s), &m)
	}
	for _, c := range []struct {
		name  string
		field map[string]any
		check func(string) error
	}{
		{"response_format json_schema", map[string]any{"response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "x", "schema": schema, "strict": true}}}, isSchema},
		{"response_format json_object", map[string]any{"response_format": map[string]any{"type": "json_object"}}, isObject},
		{"structured_outputs json", map[string]any{"structured_outputs": map[string]any{"json": schema}}, isSchema},
		{"structured_outputs json as a string", map[string]any{"structured_outputs": map[string]any{"json": structuredSchema}}, isSchema},
		{"structured_outputs regex", map[string]any{"structured_outputs": map[string]any{"regex": `[A-Z]{3}-[0-9]{2}`}}, isCode},
		{"structured_outputs choice", map[string]any{"structured_outputs": map[string]any{"choice": []string{"red", "green", "blue"}}}, isChoice},
		{"structured_outputs grammar", map[string]any{"structured_outputs": map[string]any{"grammar": `root ::= [A-Z] [A-Z] [A-Z] "-" [0-9] [0-9]`}}, isCode},
		{"guided_json", map[string]any{"guided_json": schema}, isSchema},
		{"guided_regex", map[string]any{"guided_regex": `[A-Z]{3}-[0-9]{2}`}, isCode},
		{"guided_choice", map[string]any{"guided_choice": []string{"red", "green", "blue"}}, isChoice},
		{"guided_grammar (Lark-like)", map[string]any{"guided_grammar": "start: COLOR\nCOLOR: \"red\" | \"green\" | \"blue\""}, isChoice},
		{"llama.cpp grammar", map[string]any{"grammar": `root ::= "red" | "green" | "blue"`}, isChoice},
		{"llama.cpp json_schema", map[string]any{"json_schema": schema}, isSchema},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
				body := map[string]any{"max_tokens": 64, "temperature": 1, "n": 3, "seed": 5}
				if path == "/v1/completions" {
					body["prompt"] = "Answer:"
				} else {
					body["messages"] = []map[string]any{{"role": "user", "content": "answer"}}
				}
				for k, v := range c.field {
					body[k] = v
				}
				texts, finish := structuredTexts(t, env, path, body)
				for i, s := range texts {
					if err := c.check(s); err != nil {
						t.Errorf("%s choice %d (%s): %v", path, i, finish[i], err)
					} else if finish[i] != "stop" {
						t.Errorf("%s choice %d: finish %q, want stop", path, i, finish[i])
					}
				}
				body["stream"] = true
				for i, s := range streamedTexts(t, env, path, body, 3) {
					if err := c.check(s); err != nil {
						t.Errorf("%s streamed choice %d: %v", path, i, err)
					}
				}
			}
		})
	}
}

// structuredTexts posts body and returns each choice's text and finish reason.
func structuredTexts(t *testing.T, env *testEnv, path string, body map[string]any) ([]string, []string) {
	t.Helper()
	var texts, finish []string
	if path == "/v1/completions" {
		var res completionResponse
		env.post(t, path, body, &res)
		for _, c := range res.Choices {
			texts, finish = append(texts, c.Text), append(finish, deref(c.FinishReason))
		}
		return texts, finish
	}
	var res chatResponse
	env.post(t, path, body, &res)
	for _, c := range res.Choices {
		texts, finish = append(texts, deref(c.Message.Content)), append(finish, deref(c.FinishReason))
	}
	return texts, finish
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// streamedTexts posts a streaming body and returns each choice's concatenated text.
func streamedTexts(t *testing.T, env *testEnv, path string, body map[string]any, n int) []string {
	t.Helper()
	b, _ := json.Marshal(body)
	status, out := env.do(t, http.MethodPost, path, b)
	if status != http.StatusOK {
		t.Fatalf("stream: status %d: %s", status, out)
	}
	texts := make([]string, n)
	for _, line := range strings.Split(string(out), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			Choices []struct {
				Index int    `json:"index"`
				Text  string `json:"text"`
				Delta *struct {
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		for _, c := range ev.Choices {
			texts[c.Index] += c.Text
			if c.Delta != nil {
				texts[c.Index] += deref(c.Delta.Content)
			}
		}
	}
	return texts
}

// TestStructuredOutputErrors: a constraint that cannot be compiled or is given twice is a
// 400 naming the field, what is wrong and where; nothing is generated.
func TestStructuredOutputErrors(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		name, path, body, param, msg string
	}{
		{"unsupported keyword", "/v1/chat/completions", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","if":{"required":["a"]}}}}}`,
			"response_format.json_schema.schema", "if"},
		{"bad regex", "/v1/completions", `{"prompt":"x","guided_regex":"(a)\\1"}`, "guided_regex", "backreference"},
		{"gbnf syntax", "/v1/completions", `{"prompt":"x","grammar":"root ::= \"a"}`, "grammar", "1:"},
		{"empty choice", "/v1/chat/completions", `{` + msgs + `,"guided_choice":[]}`, "guided_choice", "at least one"},
		{"schema not an object", "/v1/completions", `{"prompt":"x","guided_json":[1]}`, "guided_json", "JSON Schema object"},
		{"two constraints", "/v1/chat/completions", `{` + msgs + `,"guided_regex":"a","structured_outputs":{"choice":["b"]}}`, "guided_regex", "both constrain"},
		{"empty structured_outputs", "/v1/completions", `{"prompt":"x","structured_outputs":{}}`, "structured_outputs", "needs one of"},
		{"unbounded whitespace", "/v1/completions", `{"prompt":"x","guided_json":{"type":"object"},"guided_whitespace_pattern":"[ ]*"}`, "guided_json", "bounded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, body := env.do(t, http.MethodPost, c.path, []byte(c.body))
			if status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", status, body)
			}
			e := apiErrorOf(t, body)
			if e["param"] != c.param {
				t.Errorf("param %v, want %q: %s", e["param"], c.param, body)
			}
			if msg, _ := e["message"].(string); !strings.Contains(msg, c.msg) {
				t.Errorf("message %q does not say %q", msg, c.msg)
			}
		})
	}
}

// TestStructuredCompileDoesNotStall: grammars whose compiles run into the limits (a regex
// whose automaton explodes) compile on their requests' goroutines, so a plain request
// beside four of them is answered as fast as on an idle server (within 2 s here), and each
// of them gets its 400.
func TestStructuredCompileDoesNotStall(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	var wg sync.WaitGroup
	statuses := make([]int, 4)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// (a|b)*a(a|b){k}: the DFA needs 2^k states; k differs so that no two share a compile.
			body := fmt.Sprintf(`{"prompt":"x","max_tokens":4,"guided_regex":"(a|b)*a(a|b){%d}"}`, 20+i)
			statuses[i], _ = env.do(t, http.MethodPost, "/v1/completions", []byte(body))
		}()
	}
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	var res completionResponse
	env.post(t, "/v1/completions", map[string]any{"prompt": "x", "max_tokens": 4}, &res)
	if d := time.Since(start); d > 2*time.Second || len(res.Choices) != 1 {
		t.Errorf("plain request beside pathological compiles: %v, %d choices", d, len(res.Choices))
	}
	wg.Wait()
	for i, s := range statuses {
		if s != http.StatusBadRequest {
			t.Errorf("pathological regex %d: status %d, want 400", i, s)
		}
	}
}

// TestStructuredOutputPrompts: a completions request of several prompts holds each prompt's
// output to the constraint with a processor of its own (one compile, cloned).
func TestStructuredOutputPrompts(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	var res completionResponse
	env.post(t, "/v1/completions", map[string]any{"prompt": []string{"One", "Two", "Three"}, "n": 2, "max_tokens": 64,
		"temperature": 1, "guided_json": json.RawMessage(structuredSchema)}, &res)
	if len(res.Choices) != 6 {
		t.Fatalf("%d choices, want 6", len(res.Choices))
	}
	for i, c := range res.Choices {
		if err := checkSchemaInstance(c.Text); err != nil || deref(c.FinishReason) != "stop" {
			t.Errorf("choice %d (%s): %v", i, deref(c.FinishReason), err)
		}
	}
}

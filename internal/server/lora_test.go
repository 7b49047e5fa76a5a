package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/lora"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// tinyLoRAConfig is the tiny engine's model shape (openTinyEngine's), for adapters of it.
func tinyLoRAConfig(t *testing.T) format.Config {
	t.Helper()
	shape, err := synth.Lookup("smollm2-135m")
	if err != nil {
		t.Fatal(err)
	}
	c := shape.Config
	c.Layers, c.VocabSize, c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.RopeDim, c.FFNDim, c.ContextLen = 2, 320, 64, 4, 2, 16, 16, 128, testContextLen
	return c
}

// complete posts a greedy completion for model and returns its text and reported model.
func complete(t *testing.T, env *testEnv, model string, maxTokens int) (string, string) {
	t.Helper()
	var res completionResponse
	env.post(t, "/v1/completions", map[string]any{"model": model, "prompt": "hello there", "max_tokens": maxTokens, "temperature": 0, "ignore_eos": true}, &res)
	return res.Choices[0].Text, res.Model
}

// TestLoRAServing drives the adapter API as a vLLM user would: --lora-modules at start,
// /v1/models listing adapters with their parent, a request's model picking an adapter,
// /v1/load_lora_adapter and /v1/unload_lora_adapter (behind the API key) with clear
// errors for a name in use, a rank above --max-lora-rank, another base's shapes and a bad
// file, an unload while a request streams with the adapter (which finishes unchanged),
// and kvasir:lora_requests_info naming the running adapter.
func TestLoRAServing(t *testing.T) {
	c := tinyLoRAConfig(t)
	dir := t.TempDir()
	all := []lora.Target{lora.Q, lora.K, lora.V, lora.O, lora.Gate, lora.Up, lora.Down}
	peft, gg := filepath.Join(dir, "r8"), filepath.Join(dir, "r16.gguf")
	if err := lora.WritePEFT(peft, lora.Random(c, 8, 16, all, 0.3, 1), c, false); err != nil {
		t.Fatal(err)
	}
	if err := lora.WriteGGUF(gg, lora.Random(c, 16, 16, []lora.Target{lora.Q, lora.V, lora.Down}, 0.3, 2), c); err != nil {
		t.Fatal(err)
	}
	big, other := filepath.Join(dir, "r32.gguf"), filepath.Join(dir, "other.gguf")
	if err := lora.WriteGGUF(big, lora.Random(c, 32, 16, []lora.Target{lora.Q}, 0.1, 3), c); err != nil {
		t.Fatal(err)
	}
	oc := c
	oc.Dim = 128
	if err := lora.WriteGGUF(other, lora.Random(oc, 4, 8, []lora.Target{lora.Q}, 0.1, 4), oc); err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t, kvasir.Options{LoRAModules: []kvasir.LoRAModule{{Name: "r8", Path: peft}}, MaxLoRAs: 2, MaxLoRARank: 16},
		Config{APIKey: "sesame"})

	var models struct {
		Data []modelCard `json:"data"`
	}
	status, body := env.do(t, http.MethodGet, "/v1/models", nil)
	if status != http.StatusOK || json.Unmarshal(body, &models) != nil || len(models.Data) != 2 ||
		models.Data[1].ID != "r8" || models.Data[1].Parent != testModelName || models.Data[1].Root != peft {
		t.Fatalf("/v1/models: %d %s", status, body)
	}
	base, m := complete(t, env, testModelName, 16)
	r8, m8 := complete(t, env, "r8", 16)
	if m != testModelName || m8 != "r8" {
		t.Errorf("responses name models %q and %q", m, m8)
	}
	if base == r8 {
		t.Errorf("the adapter did not change the output: %q", base)
	}
	if again, _ := complete(t, env, "", 16); again != base {
		t.Errorf("base output %q after the adapter's, %q before", again, base)
	}

	load := func(name, path string) (int, string) {
		b, _ := json.Marshal(map[string]string{"lora_name": name, "lora_path": path})
		status, body := env.do(t, http.MethodPost, "/v1/load_lora_adapter", b)
		return status, string(body)
	}
	if status, body := load("r16", gg); status != http.StatusOK || !strings.Contains(body, "Success") {
		t.Fatalf("load: %d %s", status, body)
	}
	for _, tc := range []struct {
		name, path, want string
		status           int
	}{
		{"r16", gg, "has already been loaded", 400},
		{"r32", big, "rank 32 exceeds --max-lora-rank 16", 400},
		{"other", other, "adapter maps 128 to 64 features, the base model's projection 64 to 64", 400},
		{"junk", filepath.Join(dir, "r8", "adapter_config.json"), "gguf", 400},
		{"nothing", filepath.Join(dir, "none"), "no such file", 400},
		{testModelName, gg, "base model", 400},
		{"", gg, "lora_name", 400},
	} {
		if status, body := load(tc.name, tc.path); status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("load %s %s: %d %s, want %d %q", tc.name, tc.path, status, body, tc.status, tc.want)
		}
	}
	status, body = env.do(t, http.MethodPost, "/v1/completions", []byte(`{"model":"r32","prompt":"x","max_tokens":1}`))
	if status != http.StatusNotFound || !strings.Contains(string(body), "serves tiny, r8, r16") {
		t.Errorf("unknown model: %d %s", status, body)
	}
	// Without the key the adapter endpoints are refused.
	res, err := http.Post(env.ts.URL+"/v1/unload_lora_adapter", "application/json", strings.NewReader(`{"lora_name":"r16"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("unload without the API key: %d", res.StatusCode)
	}

	// Unload while a request streams with the adapter: it finishes as it would have.
	// 240 tokens (nearly the tiny model's context), so that the request still runs when the
	// metrics are read after its first event: with 48 it sometimes had finished.
	want, _ := complete(t, env, "r16", 240)
	req, _ := http.NewRequest(http.MethodPost, env.ts.URL+"/v1/completions",
		strings.NewReader(`{"model":"r16","prompt":"hello there","max_tokens":240,"temperature":0,"ignore_eos":true,"stream":true}`))
	req.Header.Set("Authorization", "Bearer sesame")
	req.Header.Set("Content-Type", "application/json")
	sres, err := env.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer sres.Body.Close()
	rd := bufio.NewReader(sres.Body)
	first, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "data: ") {
		t.Fatalf("first event %q: %v", first, err)
	}
	if blank, err := rd.ReadString('\n'); err != nil || blank != "\n" {
		t.Fatalf("after the first event %q: %v", blank, err)
	}
	_, metrics := env.do(t, http.MethodGet, "/metrics", nil)
	if !bytes.Contains(metrics, []byte(`kvasir:lora_requests_info{engine="0",max_lora="2",model_name="tiny",running_lora_adapters="r16"`)) {
		t.Errorf("metrics while r16 runs:\n%s", grepLines(metrics, "lora"))
	}
	if status, body := env.do(t, http.MethodPost, "/v1/unload_lora_adapter", []byte(`{"lora_name":"r16"}`)); status != http.StatusOK {
		t.Fatalf("unload: %d %s", status, body)
	}
	rest, err := readEvents(rd)
	if err != nil {
		t.Fatal(err)
	}
	text := ""
	for _, ev := range append([]string{strings.TrimPrefix(strings.TrimSpace(first), "data: ")}, rest...) {
		var chunk completionResponse
		if ev == "[DONE]" || json.Unmarshal([]byte(ev), &chunk) != nil || len(chunk.Choices) == 0 {
			continue
		}
		text += chunk.Choices[0].Text
	}
	if text != want {
		t.Errorf("streamed across the unload: %q, before it %q", text, want)
	}
	if status, _ := env.do(t, http.MethodPost, "/v1/unload_lora_adapter", []byte(`{"lora_name":"r16"}`)); status != http.StatusNotFound {
		t.Errorf("second unload: %d", status)
	}
	if status, _ := env.do(t, http.MethodPost, "/v1/completions", []byte(`{"model":"r16","prompt":"x","max_tokens":1}`)); status != http.StatusNotFound {
		t.Errorf("request of an unloaded adapter: %d", status)
	}
	waitIdle(t, env.eng, 5e9)
	_, metrics = env.do(t, http.MethodGet, "/metrics", nil)
	if !bytes.Contains(metrics, []byte(`kvasir:lora_requests_info{engine="0",max_lora="2",model_name="tiny",running_lora_adapters="",waiting_lora_adapters=""}`)) {
		t.Errorf("idle metrics:\n%s", grepLines(metrics, "lora"))
	}
}

// TestLoRADisabled: without LoRA the adapter endpoints say how to turn it on, and
// lora_requests_info is not exported (as vLLM).
func TestLoRADisabled(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	status, body := env.do(t, http.MethodPost, "/v1/load_lora_adapter", []byte(`{"lora_name":"a","lora_path":"/x"}`))
	if status != http.StatusBadRequest || !strings.Contains(string(body), "--enable-lora") {
		t.Errorf("load without LoRA: %d %s", status, body)
	}
	if _, metrics := env.do(t, http.MethodGet, "/metrics", nil); bytes.Contains(metrics, []byte("lora_requests_info")) {
		t.Error("lora_requests_info exported without LoRA")
	}
}

// grepLines returns the lines of b that contain s.
func grepLines(b []byte, s string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

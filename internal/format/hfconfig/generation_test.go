package hfconfig

import (
	"reflect"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func TestParseGenerationConfig(t *testing.T) {
	// Llama 3.1 8B Instruct's generation_config.json.
	data := []byte(`{
  "bos_token_id": 128000,
  "do_sample": true,
  "eos_token_id": [128001, 128008, 128009],
  "temperature": 0.6,
  "top_p": 0.9,
  "transformers_version": "4.42.3"
}`)
	g, err := ParseGenerationConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	want := GenerationConfig{
		BOSTokenID: TokenIDs{128000}, EOSTokenIDs: TokenIDs{128001, 128008, 128009},
		DoSample: ptr(true), Temperature: ptr(0.6), TopP: ptr(0.9),
	}
	if !reflect.DeepEqual(*g, want) {
		t.Fatalf("got %+v, want %+v", *g, want)
	}
	if g.TopK != nil || g.MaxLength != nil || g.RepetitionPenalty != nil {
		t.Error("absent fields set")
	}
	// Qwen3's: single ids, top_k, repetition penalty.
	g, err = ParseGenerationConfig([]byte(`{"bos_token_id":151643,"pad_token_id":151643,"do_sample":true,
		"eos_token_id":[151645,151643],"temperature":0.6,"top_k":20,"top_p":0.95,"repetition_penalty":1.05,"max_length":40960}`))
	if err != nil {
		t.Fatal(err)
	}
	if *g.TopK != 20 || *g.RepetitionPenalty != 1.05 || *g.MaxLength != 40960 || g.PadTokenID.First() != 151643 || len(g.EOSTokenIDs) != 2 {
		t.Errorf("qwen3 generation config %+v", *g)
	}
	out, err := g.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseGenerationConfig(out)
	if err != nil || !reflect.DeepEqual(again, g) {
		t.Fatalf("round trip: %+v %v\n%s", again, err, out)
	}
	if !strings.Contains(string(out), `"bos_token_id": 151643,`) {
		t.Errorf("single id not written bare:\n%s", out)
	}
}

func TestGenerationConfigErrors(t *testing.T) {
	for _, tt := range []struct{ json, want string }{
		{`{"temperature": -1}`, "temperature"},
		{`{"top_p": 1.5}`, "top_p"},
		{`{"top_k": -2}`, "top_k"},
		{`{"max_length": -2}`, "max_length"},
		{`{"repetition_penalty": 0}`, "repetition_penalty"},
		{`{"min_p": 2}`, "min_p"},
		{`{"eos_token_id": "x"}`, "token id"},
		{`{"eos_token_id": [1.5]}`, "token id"},
		{`[`, "generation_config.json"},
	} {
		_, err := ParseGenerationConfig([]byte(tt.json))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tt.json, err, tt.want)
		}
	}
	if g, err := ParseGenerationConfig([]byte(`{"eos_token_id": null}`)); err != nil || g.EOSTokenIDs.First() != -1 {
		t.Errorf("null eos: %v %v", g, err)
	}
}

func FuzzParseGenerationConfig(f *testing.F) {
	f.Add([]byte(`{"bos_token_id":1,"eos_token_id":[2,3],"temperature":0.7,"top_k":5}`))
	f.Add([]byte(`{"eos_token_id":null,"do_sample":false}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGenerationConfig(data)
		if err != nil {
			return
		}
		out, err := g.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseGenerationConfig(out)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !reflect.DeepEqual(normIDs(again), normIDs(g)) {
			t.Fatalf("round trip: %+v vs %+v", again, g)
		}
	})
}

// normIDs maps empty id lists to nil so that [] and null compare equal.
func normIDs(g *GenerationConfig) GenerationConfig {
	c := *g
	for _, p := range []*TokenIDs{&c.BOSTokenID, &c.EOSTokenIDs, &c.PadTokenID} {
		if len(*p) == 0 {
			*p = nil
		}
	}
	return c
}

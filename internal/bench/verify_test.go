package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestGenerateVerify: bench generate with a verify length times verify steps against
// decode steps at each batch size asked, prints one line per batch size and puts the
// figures in its JSON; bad counts are refused.
func TestGenerateVerify(t *testing.T) {
	fm, err := format.Open(testdata.Path(t, "models/stories260K/stories260K.gguf"), format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := kvasir.Load(fm, kvasir.Options{Threads: 2})
	if err != nil {
		fm.Close()
		t.Fatal(err)
	}
	defer l.Close()
	res, err := Generate(l, GenerateOptions{PromptLen: 20, GenLen: 6, Chunk: 8, VerifyLen: 4, VerifyBatches: []int{1, 3}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Verify) != 2 {
		t.Fatalf("%d verify results, want 2: %+v", len(res.Verify), res.Verify)
	}
	for i, v := range res.Verify {
		if v.Batch != []int{1, 3}[i] || v.VerifyLen != 4 || v.DecodeStepMS <= 0 || v.VerifyStepMS <= 0 ||
			v.Ratio != v.VerifyStepMS/v.DecodeStepMS {
			t.Errorf("verify result %d: %+v", i, v)
		}
	}
	var b bytes.Buffer
	WriteGenerate(&b, res)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[4], "verify:  batch 1: 1+4-token step ") || !strings.HasPrefix(lines[5], "verify:  batch 3: 1+4-token step ") ||
		!strings.HasSuffix(lines[5], "x") {
		t.Errorf("report:\n%s", b.String())
	}
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"verify":[{"batch":1,"verify_len":4,"decode_step_ms":`) {
		t.Errorf("JSON without the verify figures: %s", data)
	}
	if data, _ := json.Marshal(GenerateResult{}); strings.Contains(string(data), "verify") {
		t.Errorf("verify figures without --verify-len: %s", data)
	}
	m := l.Model()
	for _, c := range []struct {
		prompt, steps, k int
		batches          []int
	}{{20, 4, 0, []int{1}}, {0, 4, 2, []int{1}}, {20, 4, 2, []int{0}}} {
		if _, err := Verify(m, c.prompt, c.steps, c.k, c.batches); err == nil {
			t.Errorf("Verify(%d, %d, %d, %v) accepted", c.prompt, c.steps, c.k, c.batches)
		}
	}
	if _, err := Generate(l, GenerateOptions{PromptLen: 20, GenLen: 2, VerifyLen: -1}); err == nil {
		t.Error("a negative verify length accepted")
	}
}

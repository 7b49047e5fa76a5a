package cudabackend_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/lowrank"
	"github.com/kvasir-llm/kvasir/internal/model"
)

// TestBackendLowRankMatchesDense: stories260K with every block matrix factorized at full
// rank (kvasir lowrank) runs on the device as two matmuls per matrix and gives the logits
// of the dense model, against the CPU reference path, within twice the device's own dense
// error (plus 1e-3: the factors are rounded to the device's BF16 as the matrices are).
func TestBackendLowRankMatchesDense(t *testing.T) {
	be := newBackend(t)
	fm := openStories(t)
	defer fm.Close()
	path := filepath.Join(t.TempDir(), "full-rank.gguf")
	if _, err := lowrank.Factorize(fm, path, lowrank.Options{Rank: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	lm, err := format.Open(path, format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	prompt := []int32{1, 403, 407, 261, 378, 425, 375, 302}
	ref, err := model.NewReference(fm)
	if err != nil {
		t.Fatal(err)
	}
	var want []float32
	for _, tok := range prompt {
		if want, err = ref.Forward(int(tok)); err != nil {
			t.Fatal(err)
		}
	}
	logits := func(m *format.Model) []float32 {
		md, err := model.New(m, model.Options{Backends: []backend.Backend{be}})
		if err != nil {
			t.Fatal(err)
		}
		defer md.Close()
		_, l := prefilled(t, md, prompt, 1)
		return append([]float32(nil), l...)
	}
	dense, factored := relErr(logits(fm), want), relErr(logits(lm), want)
	fmt.Printf("RESULT|model|stories260K full-rank lowrank on cuda: logits' relative error to the CPU reference|%.2e|dense on cuda %.2e\n", factored, dense)
	if factored > 2*dense+1e-3 {
		t.Errorf("factorized logits' relative error %.3e, the dense model's %.3e", factored, dense)
	}
}

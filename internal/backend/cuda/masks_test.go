package cuda

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/backendtest"
	"github.com/kvasir-llm/kvasir/internal/sample"
)

// TestPackMasks: the masks buffer holds one offset word per row (noMask for a row without
// a mask), then the masks of the masked rows in row order; a step without masks takes no
// buffer.
func TestPackMasks(t *testing.T) {
	const vocab = 40 // two words per mask
	masks := [][]uint32{nil, {0xdeadbeef, 0xff}, nil, {1, 0x80}}
	n := MaskedLen(masks, vocab)
	if n != 4+2*2 {
		t.Fatalf("buffer of %d words, want 8", n)
	}
	got := make([]int32, n)
	PackMasks(got, masks)
	want := []int32{noMask, 4, noMask, 6, int32(-559038737), 0xff, 1, 0x80}
	if !slices.Equal(got, want) {
		t.Errorf("packed %v, want %v", got, want)
	}
	if n := MaskedLen(nil, vocab); n != 0 {
		t.Errorf("no masks take %d words", n)
	}
	if n := MaskedLen([][]uint32{nil, nil}, vocab); n != 0 {
		t.Errorf("nil masks take %d words", n)
	}
}

// uploadMasks packs masks into a device buffer as the kernels read them.
func (e *env) uploadMasks(t *testing.T, masks [][]uint32, vocab int) Buffer {
	t.Helper()
	packed := make([]int32, MaskedLen(masks, vocab))
	PackMasks(packed, masks)
	return e.uploadI32(t, packed)
}

// testArgmaxMasked: the argmax kernels under masks pick the largest allowed logit, rows
// without a mask the plain argmax, and a row allowing nothing 0.
func testArgmaxMasked(t *testing.T, e *env) {
	r := rand.New(rand.NewPCG(7, 8))
	const rows, vocab = 9, 50000
	lv := randVals(r, rows*vocab, 10)
	masks := backendtest.RandomMasks(r, rows, vocab)
	masks[rows-1] = make([]uint32, backend.MaskWords(vocab)) // allows nothing
	lb, _ := e.upload(t, F32, lv)
	out := e.uploadI32(t, make([]int32, rows))
	work := e.poisoned(t, F32, 2*ArgmaxParts*rows)
	mb := e.uploadMasks(t, masks, vocab)
	e.do(t, func() error { return e.ops.Argmax(out, lb, work, rows, vocab, mb) })
	got := e.downloadI32(t, out)
	want := make([]int32, rows)
	for i := range rows {
		row := lv[i*vocab : (i+1)*vocab]
		if i < rows-1 {
			want[i] = int32(sample.Greedy(backendtest.Disallowed(row, masks[i])))
		}
		if got[i] != want[i] {
			t.Errorf("masked argmax row %d = %d, want %d", i, got[i], want[i])
		}
	}
	result(t, "kernel", "argmax f32, vocabulary masks", fmt.Sprintf("%d/%d rows", countEq(got, want), rows), "exact")
}

// testSampleMasked: the sampling kernel under masks draws what the reference draws from
// the logits with the disallowed tokens at -Inf, never a disallowed token, and the only
// allowed token of a one-token mask.
func testSampleMasked(t *testing.T, e *env) {
	r := rand.New(rand.NewPCG(9, 10))
	const rows, vocab = 24, 32000
	lv := randVals(r, rows*vocab, 8)
	masks := backendtest.RandomMasks(r, rows, vocab)
	temps, topps, us := make([]float32, rows), make([]float32, rows), make([]float32, rows)
	topks := make([]int32, rows)
	for i := range rows {
		temps[i] = []float32{0.7, 1, 1.5}[i%3]
		topks[i] = []int32{0, 40, 1000}[(i/3)%3]
		topps[i] = []float32{1, 0.9}[(i/9)%2]
		us[i] = r.Float32()
	}
	lb, _ := e.upload(t, F32, lv)
	tb, _ := e.upload(t, F32, temps)
	pb, _ := e.upload(t, F32, topps)
	ub, _ := e.upload(t, F32, us)
	out := e.uploadI32(t, make([]int32, rows))
	params := SampleParams{Temperature: tb, TopK: e.uploadI32(t, topks), TopP: pb, Uniform: ub, Masks: e.uploadMasks(t, masks, vocab)}
	e.do(t, func() error { return e.ops.Sample(out, lb, rows, vocab, params) })
	got := e.downloadI32(t, out)
	exact, close := 0, 0
	for i := range rows {
		row := backendtest.Disallowed(lv[i*vocab:(i+1)*vocab], masks[i])
		if !backend.Allowed(masks[i], int(got[i])) {
			t.Errorf("masked sample row %d drew disallowed token %d", i, got[i])
			continue
		}
		want, margin := sampleRef(row, float64(temps[i]), int(topks[i]), float64(topps[i]), float64(us[i]))
		switch {
		case int(got[i]) == want:
			exact++
		case margin < 1e-4 && i != 1:
			close++ // within float rounding of a boundary
		default:
			t.Errorf("masked sample row %d (T=%g k=%d p=%g u=%g): got %d, want %d (margin %.2g)", i, temps[i], topks[i], topps[i], us[i], got[i], want, margin)
		}
	}
	result(t, "kernel", "sample f32, vocabulary masks", fmt.Sprintf("%d/%d rows exact", exact, rows), fmt.Sprintf("%d at a rounding boundary", close))
}

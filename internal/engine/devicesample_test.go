package engine

import (
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/sample"
)

// samplingBackend is a CPU backend that also samples "on the device" the way a GPU
// backend does (backend.LogitsSampler), counting which output path each step took.
type samplingBackend struct {
	*cpubackend.Backend
	sampled, copied atomic.Int64
}

func (s *samplingBackend) LogitsSample(dst []int32, x, w backend.Tensor, rows []backend.SampleRow) error {
	vocab := w.Shape()[0]
	logits := make([]float32, len(dst)*vocab)
	if err := s.Backend.Logits(logits, x, w); err != nil {
		return err
	}
	for i, r := range rows {
		dst[i] = int32(sample.DrawIndexOrder(logits[i*vocab:(i+1)*vocab], r.Temperature, int(r.TopK), r.TopP, float64(r.Uniform)))
	}
	s.sampled.Add(1)
	return nil
}

func (s *samplingBackend) Logits(dst []float32, x, w backend.Tensor) error {
	s.copied.Add(1)
	return s.Backend.Logits(dst, x, w)
}

// TestDeviceSampling: on a backend that samples on the device, steps whose sequences all
// sample plainly (temperature, top-k, top-p, or greedy) take their tokens from the device
// and copy no logits; a request that asks for logprobs (or forks) sends its steps through
// the host sampler. Greedy requests batched with sampled ones get the greedy tokens, and a
// seeded workload gives the same tokens run after run.
func TestDeviceSampling(t *testing.T) {
	tm := newTinyModel(t)
	seed := func(v uint64) *uint64 { return &v }
	greedy := Request{PromptTokens: randomPrompt(1, 9, 320), Params: SamplingParams{MaxTokens: 12, IgnoreEOS: true}}
	reqs := []Request{
		greedy,
		{PromptTokens: randomPrompt(2, 14, 320), Params: SamplingParams{MaxTokens: 12, IgnoreEOS: true, Temperature: 0.8, TopK: 20, TopP: 0.9, Seed: seed(7)}},
		{PromptTokens: randomPrompt(3, 6, 320), Params: SamplingParams{MaxTokens: 12, IgnoreEOS: true, Temperature: 1.2, Seed: seed(9), N: 2}},
	}
	want := sequential(t, tm.engine(t, Config{}), []Request{greedy})[0][0].tokens

	run := func(reqs []Request) ([][]result, *samplingBackend) {
		sb := &samplingBackend{Backend: cpubackend.New(2)}
		t.Cleanup(func() { sb.Close() })
		m, err := model.New(tm.fm, model.Options{Backends: []backend.Backend{sb}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		e := (&tinyModel{fm: tm.fm, m: m, tok: tm.tok}).engine(t, Config{})
		out := generate(t, e, reqs)
		waitIdle(t, e)
		return out, sb
	}
	first, sb := run(reqs)
	again, _ := run(reqs)
	if !slices.Equal(first[0][0].tokens, want) {
		t.Errorf("greedy request batched with sampled ones: %v, alone on the CPU sampler: %v", first[0][0].tokens, want)
	}
	if fmt.Sprint(first) != fmt.Sprint(again) {
		t.Errorf("seeded sampling on the device is not reproducible:\n%v\n%v", first, again)
	}
	if slices.Equal(first[1][0].tokens, first[2][0].tokens) || slices.Equal(first[2][0].tokens, first[2][1].tokens) {
		t.Errorf("sampled choices repeat each other: %v", first)
	}
	if sb.sampled.Load() == 0 {
		t.Errorf("no step sampled on the device")
	}
	// The fork of the n=2 request samples its first tokens on the host.
	if sb.copied.Load() == 0 {
		t.Errorf("the forking step did not copy logits for the host sampler")
	}

	withLogprobs := append(slices.Clone(reqs), Request{PromptTokens: randomPrompt(4, 5, 320), Params: SamplingParams{MaxTokens: 30, IgnoreEOS: true, Logprobs: true}})
	out, sb := run(withLogprobs)
	// The seeded request draws the same way on the host (steps with the logprobs request
	// or a fork) as on the device (steps alone): its tokens do not depend on its company.
	alone, _ := run(reqs[1:2])
	if !slices.Equal(alone[0][0].tokens, first[1][0].tokens) || !slices.Equal(alone[0][0].tokens, out[1][0].tokens) {
		t.Errorf("seeded request alone %v, with a fork %v, with a logprobs request %v", alone[0][0].tokens, first[1][0].tokens, out[1][0].tokens)
	}
	if len(out[3][0].lps) != 30 {
		t.Errorf("logprobs request got %d logprobs, want 30", len(out[3][0].lps))
	}
	if sb.copied.Load() < 30 {
		t.Errorf("%d steps copied logits back; the logprobs request needs its 30", sb.copied.Load())
	}
}

// TestSampleRows maps samplers to device settings: greedy is top-1 at draw 0, an unset
// top-p keeps everything, and a sampled row takes its sampler's next uniform.
func TestSampleRows(t *testing.T) {
	mk := func(p sample.Params) *sequence {
		return &sequence{sampler: sample.New(p), req: &request{}}
	}
	seqs := []*sequence{mk(sample.Params{}), mk(sample.Params{Temperature: 0.5, TopK: 7, Seed: 3}), mk(sample.Params{Temperature: 1, TopP: 0.25, Seed: 3})}
	plan := &stepPlan{}
	for _, s := range seqs {
		plan.seqs = append(plan.seqs, scheduled{seq: s, rows: []int{0}, sampling: true})
	}
	rows := sampleRows(plan)
	if !reflect.DeepEqual(rows[0], backend.SampleRow{Temperature: 1, TopK: 1, TopP: 1}) {
		t.Errorf("greedy row %+v", rows[0])
	}
	u := float32(sample.New(sample.Params{Temperature: 0.5, TopK: 7, Seed: 3}).Uniform())
	if !reflect.DeepEqual(rows[1], backend.SampleRow{Temperature: 0.5, TopK: 7, TopP: 1, Uniform: u}) {
		t.Errorf("sampled row %+v, want uniform %g", rows[1], u)
	}
	if rows[2].TopP != 0.25 || rows[2].TopK != 0 {
		t.Errorf("top-p row %+v", rows[2])
	}
	if !plainOnly(plan) {
		t.Errorf("plain samplers were not taken as plain")
	}
	seqs[1].sampler = sample.New(sample.Params{Temperature: 1, MinP: 0.1})
	if plainOnly(plan) {
		t.Errorf("a min-p sampler was taken as plain")
	}
}

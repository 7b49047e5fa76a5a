package model

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/sample"
)

// TestSessionStepGreedy checks that StepGreedy picks what sample.Greedy picks from Step's
// logits, token for token, advances the session the same way, and refuses a step past the
// session's capacity.
func TestSessionStepGreedy(t *testing.T) {
	fm, _ := openStories(t, "stories260K.bin")
	m, err := New(fm, Options{Backends: cpuBackends(t, 2, Parallel{})})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const n = 40
	bos := int32(fm.Vocab.BOS)
	host, err := m.NewSession(n + 1)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := host.Prefill([]int32{bos})
	if err != nil {
		t.Fatal(err)
	}
	want := []int32{int32(sample.Greedy(logits))}
	for len(want) < n {
		if logits, err = host.Step(want[len(want)-1]); err != nil {
			t.Fatal(err)
		}
		want = append(want, int32(sample.Greedy(logits)))
	}
	dev, err := m.NewSession(n + 1)
	if err != nil {
		t.Fatal(err)
	}
	if logits, err = dev.Prefill([]int32{bos}); err != nil {
		t.Fatal(err)
	}
	got := []int32{int32(sample.Greedy(logits))}
	for len(got) < n {
		next, err := dev.StepGreedy(got[len(got)-1])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, next)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("StepGreedy tokens\n%v\ndiffer from greedy over Step's logits\n%v", got, want)
	}
	if dev.Len() != host.Len() || dev.Len() != n {
		t.Fatalf("session lengths %d (StepGreedy) and %d (Step), want %d", dev.Len(), host.Len(), n)
	}
	for dev.Len() < dev.Cap() {
		if _, err := dev.StepGreedy(1); err != nil {
			t.Fatalf("slot %d of %d: %v", dev.Len(), dev.Cap(), err)
		}
	}
	if _, err := dev.StepGreedy(1); err == nil || !strings.Contains(err.Error(), "exceed") {
		t.Fatalf("step past the capacity: err = %v, want an overflow error", err)
	}
	if dev.Len() != dev.Cap() {
		t.Fatalf("a refused step moved the session to %d of %d", dev.Len(), dev.Cap())
	}
}

// TestSessionScore checks that Score returns, for every token of a prompt run in several
// chunks, the logits the reference path computes token by token.
func TestSessionScore(t *testing.T) {
	fm, _ := openStories(t, "stories260K.bin")
	m, err := New(fm, Options{Backends: cpuBackends(t, 2, Parallel{})})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ref, err := NewReference(fm)
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int32{int32(fm.Vocab.BOS), 403, 407, 261, 378, 425, 375, 302, 415, 443, 332, 260, 384}
	s, err := m.NewSession(len(prompt))
	if err != nil {
		t.Fatal(err)
	}
	s.Chunk = 5
	got, err := s.Score(prompt)
	if err != nil {
		t.Fatal(err)
	}
	vocab := fm.Config.VocabSize
	if len(got) != len(prompt)*vocab || s.Len() != len(prompt) {
		t.Fatalf("Score gave %d logits and length %d, want %d and %d", len(got), s.Len(), len(prompt)*vocab, len(prompt))
	}
	for i, tok := range prompt {
		want, err := ref.Forward(int(tok))
		if err != nil {
			t.Fatal(err)
		}
		for j, w := range want {
			if d := got[i*vocab+j] - w; d > 1e-3 || d < -1e-3 {
				t.Fatalf("position %d logit %d: Score %g, reference %g", i, j, got[i*vocab+j], w)
			}
		}
	}
	if _, err := s.Score(make([]int32, s.Cap()-s.Len()+1)); err == nil {
		t.Fatal("Score past the session's capacity succeeded")
	}
}

package sample

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMask: Set/Allows/Count/And/Apply agree with a plain set of ids, at vocabulary sizes
// on and off word boundaries.
func TestMask(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 31, 32, 33, 100, 320} {
		var a, b []int32
		inA, inB := map[int32]bool{}, map[int32]bool{}
		for id := range int32(n) {
			if r.IntN(3) == 0 {
				a, inA[id] = append(a, id), true
			}
			if r.IntN(2) == 0 {
				b, inB[id] = append(b, id), true
			}
		}
		m := NewMask(n, a...)
		if len(m) != MaskWords(n) || m.CheckLen(n) != nil || m.CheckLen(n+32) == nil {
			t.Fatalf("n %d: %d words", n, len(m))
		}
		if m.Count(n) != len(a) {
			t.Errorf("n %d: count %d, want %d", n, m.Count(n), len(a))
		}
		m.And(NewMask(n, b...))
		logits := make([]float32, n)
		m.Apply(logits)
		both := 0
		for id := range int32(n) {
			want := inA[id] && inB[id]
			if want {
				both++
			}
			if m.Allows(id) != want || math.IsInf(float64(logits[id]), -1) == want {
				t.Errorf("n %d: id %d allowed %v, logit %v; want %v", n, id, m.Allows(id), logits[id], want)
			}
		}
		if m.Count(n) != both || m.Allows(int32(n+40)) || m.Allows(-1) {
			t.Errorf("n %d: after And count %d, want %d", n, m.Count(n), both)
		}
	}
	var none Mask
	logits := []float32{1, 2}
	none.Apply(logits)
	if logits[0] != 1 || logits[1] != 2 {
		t.Error("a nil mask changed the logits")
	}
}

// TestPenaltiesRollback: taking tokens back leaves the penalties as if they had never been
// accepted, and a clone is independent of its original.
func TestPenaltiesRollback(t *testing.T) {
	p := NewPenalties(1.5, 0.5, 0.25, []int32{0})
	q := NewPenalties(1.5, 0.5, 0.25, []int32{0})
	if err := p.Accept([]int32{1, 2, 2}); err != nil {
		t.Fatal(err)
	}
	c := p.Clone()
	if err := p.Accept([]int32{3, 1, 2}); err != nil {
		t.Fatal(err)
	}
	p.Rollback(3)
	q.Accept([]int32{1, 2, 2})
	for name, s := range map[string]Stateful{"rolled back": p, "clone": c} {
		got, want := cands(1, 1, 1, 1, -1), cands(1, 1, 1, 1, -1)
		s.(*Penalties).Process(got)
		q.Process(want)
		for i := range got.Logits {
			if got.Logits[i] != want.Logits[i] {
				t.Errorf("%s: logit %d = %v, want %v", name, i, got.Logits[i], want.Logits[i])
			}
		}
	}
}

// TestRank counts the strictly larger logits.
func TestRank(t *testing.T) {
	logits := []float32{1, 3, 3, -2, 0.5}
	for id, want := range []int{3, 1, 1, 5, 4} {
		if got := Rank(logits, id); got != want {
			t.Errorf("rank of %d = %d, want %d", id, got, want)
		}
	}
	if Rank(logits, 7) != 0 {
		t.Error("rank of an id out of range")
	}
}

package sample

import (
	"math"
	"strings"
	"testing"
)

func TestPenalties(t *testing.T) {
	p := NewPenalties(2, 0.5, 0.25, []int32{0})
	p.Accept([]int32{1})
	p.Accept([]int32{1})
	c := cands(4, -4, 4, 4)
	p.Process(c)
	// id 0: prompt only -> repetition; id 1: output twice -> repetition, presence, 2x frequency.
	want := []float32{2, -8 - 0.5 - 0.5, 4, 4}
	for i, w := range want {
		if math.Abs(float64(c.Logits[i]-w)) > 1e-6 {
			t.Errorf("logit %d = %v, want %v", i, c.Logits[i], w)
		}
	}
	if NewPenalties(1, 0, 0, nil) != nil {
		t.Error("disabled penalties should be nil")
	}
	q := p.Clone()
	q.Accept([]int32{3})
	if p.output[3] != 0 {
		t.Error("Clone shares output counts")
	}
}

func TestLogitBiasAndSuppress(t *testing.T) {
	c := cands(1, 2, 3)
	LogitBias{0: 10, 2: -100}.Process(c)
	if c.Logits[0] != 11 || c.Logits[1] != 2 || c.Logits[2] != -97 {
		t.Errorf("biased %v", c.Logits)
	}
	s := &Suppress{IDs: []int32{1}, Active: true}
	s.Process(c)
	if !math.IsInf(float64(c.Logits[1]), -1) {
		t.Errorf("suppressed %v", c.Logits)
	}
}

func TestLogprobs(t *testing.T) {
	logits := []float32{1, 3, 2, 3, -1}
	chosen, top := Logprobs(logits, 2, 3)
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v))
	}
	want := func(i int) float32 { return float32(float64(logits[i]) - math.Log(sum)) }
	if math.Abs(float64(chosen.Logprob-want(2))) > 1e-5 {
		t.Errorf("chosen %v want %v", chosen.Logprob, want(2))
	}
	ids := []int32{1, 3, 2}
	if len(top) != 3 {
		t.Fatalf("top %v", top)
	}
	for i, id := range ids {
		if top[i].ID != id || math.Abs(float64(top[i].Logprob-want(int(id)))) > 1e-5 {
			t.Errorf("top[%d] = %+v, want id %d", i, top[i], id)
		}
	}
	if _, top := Logprobs(logits, 0, 0); top != nil {
		t.Error("k=0 gives alternatives")
	}
}

// stopReference applies stop strings to the whole text at once.
func stopReference(text string, stops []string, include bool) (string, bool) {
	// Feed the text byte by byte: the first stop string to complete wins.
	best, at := "", 0
	for end := 1; end <= len(text) && best == ""; end++ {
		for _, s := range stops {
			if s != "" && strings.HasSuffix(text[:end], s) && (best == "" || end-len(s) < at) {
				best, at = s, end-len(s)
			}
		}
	}
	if best == "" {
		return text, false
	}
	if include {
		return text[:at+len(best)], true
	}
	return text[:at], true
}

func runMatcher(pieces []string, stops []string, include bool) (string, bool) {
	m := NewStopMatcher(stops, include)
	var out strings.Builder
	for _, p := range pieces {
		emit, _, ok := m.Add(p)
		out.WriteString(emit)
		if ok {
			return out.String(), true
		}
	}
	out.WriteString(m.Flush())
	return out.String(), false
}

func TestStopMatcher(t *testing.T) {
	cases := []struct {
		pieces []string
		stops  []string
		want   string
		hit    bool
	}{
		{[]string{"Hel", "lo wo", "rld"}, []string{"o w"}, "Hell", true},
		{[]string{"ab", "ab", "ac"}, []string{"abac"}, "ab", true},
		{[]string{"a", "b", "c"}, []string{"bd"}, "abc", false},
		{[]string{"xy"}, []string{"y", "xy"}, "", true},
		{[]string{"abcd"}, []string{"abcd", "c"}, "ab", true},
		{[]string{"end."}, nil, "end.", false},
	}
	for _, c := range cases {
		got, hit := runMatcher(c.pieces, c.stops, false)
		if got != c.want || hit != c.hit {
			t.Errorf("%q stops %q: %q %v, want %q %v", c.pieces, c.stops, got, hit, c.want, c.hit)
		}
	}
	// Held back while a match is pending.
	m := NewStopMatcher([]string{"STOP"}, false)
	if emit, _, _ := m.Add("go ST"); emit != "go " || m.Held() != 2 {
		t.Errorf("emit %q held %d", emit, m.Held())
	}
}

// FuzzStopMatcher checks the streaming matcher against matching the whole text at once,
// for any split of the text into pieces.
func FuzzStopMatcher(f *testing.F) {
	f.Add("hello world", "o w", "zz", uint64(12345), false)
	f.Add("aaaaab", "aab", "", uint64(7), true)
	f.Add("ééé stop", "é s", "stop", uint64(99), false)
	f.Fuzz(func(t *testing.T, text, s1, s2 string, cuts uint64, include bool) {
		var pieces []string
		rest := text
		for len(rest) > 0 {
			n := 1 + int(cuts%4)
			cuts /= 4
			if cuts == 0 {
				cuts = 13
			}
			n = min(n, len(rest))
			pieces = append(pieces, rest[:n])
			rest = rest[n:]
		}
		stops := []string{s1, s2}
		got, hit := runMatcher(pieces, stops, include)
		want, wantHit := stopReference(text, stops, include)
		if got != want || hit != wantHit {
			t.Fatalf("pieces %q stops %q include %v: %q %v, want %q %v", pieces, stops, include, got, hit, want, wantHit)
		}
	})
}

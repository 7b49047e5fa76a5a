package sample

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// TestStopSetSharedMatchers checks that matchers of one set keep their own state: two
// choices fed different text each find their own stop string.
func TestStopSetSharedMatchers(t *testing.T) {
	set := NewStopSet([]string{"end", "stop"})
	a, b := set.Matcher(false), set.Matcher(true)
	if emit, _, ok := a.Add("the e"); emit != "the " || ok || a.Held() != 1 {
		t.Fatalf("a: emit %q ok %v held %d", emit, ok, a.Held())
	}
	if emit, s, ok := b.Add("a sto"); emit != "a " || ok || s != "" {
		t.Fatalf("b: emit %q ok %v", emit, ok)
	}
	if emit, s, ok := b.Add("p!"); emit != "stop" || !ok || s != "stop" {
		t.Fatalf("b: emit %q stop %q ok %v, want \"stop\" stop true", emit, s, ok)
	}
	if emit, s, ok := a.Add("nd"); emit != "" || !ok || s != "end" {
		t.Fatalf("a: emit %q stop %q ok %v, want \"\" end true", emit, s, ok)
	}
}

// TestStopSetEmpty checks that no stop strings (or only empty ones) pass text through.
func TestStopSetEmpty(t *testing.T) {
	if s := NewStopSet([]string{"", ""}); s != nil {
		t.Fatalf("NewStopSet of empty strings = %v, want nil", s)
	}
	m := NewStopSet(nil).Matcher(false)
	if emit, _, ok := m.Add("anything"); emit != "anything" || ok || m.Held() != 0 {
		t.Fatalf("emit %q ok %v held %d", emit, ok, m.Held())
	}
}

// TestStopSetOverlaps checks cases where a failure link must be followed: a stop string
// found inside another's partial match, duplicates (the first index reported), and a stop
// string that is a suffix of a longer one ending at the same byte (the longer one starts
// first, so it wins).
func TestStopSetOverlaps(t *testing.T) {
	cases := []struct {
		stops  []string
		pieces []string
		emit   string
		stop   string
	}{
		{[]string{"abcd", "bc"}, []string{"ab", "c"}, "a", "bc"},
		{[]string{"aab"}, []string{"a", "a", "a", "b"}, "a", "aab"},
		{[]string{"xbc", "bc", "abc"}, []string{"zab", "c"}, "z", "abc"},
		{[]string{"dup", "dup"}, []string{"a dup"}, "a ", "dup"},
		{[]string{"ababc"}, []string{"abab", "abc"}, "ab", "ababc"},
	}
	for _, c := range cases {
		m := NewStopMatcher(c.stops, false)
		var out strings.Builder
		stop := ""
		for _, p := range c.pieces {
			emit, s, ok := m.Add(p)
			out.WriteString(emit)
			if ok {
				stop = s
				break
			}
		}
		if out.String() != c.emit || stop != c.stop {
			t.Errorf("stops %q pieces %q: emitted %q stop %q, want %q %q", c.stops, c.pieces, out.String(), stop, c.emit, c.stop)
		}
	}
}

// compareStopMatchers feeds pieces to the automaton and to the naive matcher, flushing both
// before the pieces flush marks (as the engine does while min_tokens holds stops back), and
// fails at the first call whose results differ.
func compareStopMatchers(t *testing.T, stops, pieces []string, flush []bool, include bool) {
	t.Helper()
	got, want := NewStopMatcher(stops, include), newNaiveStopMatcher(stops, include)
	for i, p := range pieces {
		if flush[i] {
			if g, w := got.Flush(), want.Flush(); g != w {
				t.Fatalf("stops %q pieces %q include %v: Flush before piece %d = %q, want %q", stops, pieces, include, i, g, w)
			}
		}
		ge, gs, gok := got.Add(p)
		we, ws, wok := want.Add(p)
		if ge != we || gs != ws || gok != wok || got.Held() != len(want.held) {
			t.Fatalf("stops %q pieces %q include %v: Add(%q) (piece %d) = %q %q %v held %d, want %q %q %v held %d",
				stops, pieces, include, p, i, ge, gs, gok, got.Held(), we, ws, wok, len(want.held))
		}
	}
	if g, w := got.Flush(), want.Flush(); g != w {
		t.Fatalf("stops %q pieces %q include %v: final Flush = %q, want %q", stops, pieces, include, g, w)
	}
}

// TestStopMatcherMatchesNaive compares the automaton with the naive matcher on random
// stop sets over a small alphabet (so that partial matches overlap often), random texts and
// random splits into pieces.
func TestStopMatcherMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "aab cé"
	word := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	for iter := range 3000 {
		stops := make([]string, rng.IntN(12))
		for i := range stops {
			stops[i] = word(rng.IntN(6))
		}
		text := word(rng.IntN(40))
		var pieces []string
		var flush []bool
		for rest := text; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(5))
			pieces, flush = append(pieces, rest[:n]), append(flush, rng.IntN(8) == 0)
			rest = rest[n:]
		}
		compareStopMatchers(t, stops, pieces, flush, iter%2 == 0)
	}
}

// FuzzStopMatcherNaive checks the automaton against the naive matcher for any stop strings
// (separated by NUL in stopsBlob), text, split into pieces and flushes.
func FuzzStopMatcherNaive(f *testing.F) {
	f.Add("hello world", "o w\x00zz", uint64(12345), false)
	f.Add("aaaaab", "aab\x00ab\x00b", uint64(7), true)
	f.Add("ababcabc", "abc\x00babc\x00c", uint64(99), false)
	f.Add("ééé stop", "é s\x00stop\x00\x00", uint64(3), true)
	f.Fuzz(func(t *testing.T, text, stopsBlob string, cuts uint64, include bool) {
		stops := strings.Split(stopsBlob, "\x00")
		if len(stops) > 64 || len(text) > 4096 {
			return
		}
		var pieces []string
		var flush []bool
		for rest := text; len(rest) > 0; {
			n := min(len(rest), 1+int(cuts%5))
			pieces, flush = append(pieces, rest[:n]), append(flush, cuts%7 == 3)
			rest = rest[n:]
			if cuts /= 5; cuts == 0 {
				cuts = 0x9e3779b97f4a7c15
			}
		}
		compareStopMatchers(t, stops, pieces, flush, include)
	})
}

// BenchmarkStopMatcherToken measures the matching cost of one token's text (4 bytes) with
// 4, 1024 and 131072 stop strings, words of lower-case letters as the text is: the
// automaton's cost stays flat as the count grows (the rest is cache misses in a larger set),
// where the naive matcher's grows with it (run for the smaller counts only).
func BenchmarkStopMatcherToken(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	const alphabet = "abcdefghijklmnopqrstuvwxyz "
	word := func(n int) string {
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(buf)
	}
	text := word(1 << 16)
	type matcher interface {
		Add(string) (string, string, bool)
	}
	run := func(b *testing.B, fresh func() matcher) {
		m := fresh()
		for i := 0; b.Loop(); i++ {
			at := (i * 4) % (len(text) - 4)
			if _, _, ok := m.Add(text[at : at+4]); ok {
				m = fresh()
			}
		}
	}
	for _, count := range []int{4, 1024, 131072} {
		stops := make([]string, count)
		for i := range stops {
			// Long enough that almost none occurs in the text, so matching goes on.
			stops[i] = word(8 + rng.IntN(8))
		}
		set := NewStopSet(stops)
		b.Run(fmt.Sprintf("automaton/stops=%d", count), func(b *testing.B) {
			run(b, func() matcher { return set.Matcher(false) })
		})
		if count <= 1024 {
			b.Run(fmt.Sprintf("naive/stops=%d", count), func(b *testing.B) {
				run(b, func() matcher { return newNaiveStopMatcher(stops, false) })
			})
		}
	}
}

// TestStopSetMemory builds sets of 16 KiB of random stop strings, short ones (many nodes
// with byte tables) to long ones: each takes at most 64 bytes per byte of stop strings,
// building included, the bound docs/API.md gives for --max-stop-bytes.
func TestStopSetMemory(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const total = 16 << 10
	for _, length := range []int{2, 3, 4, 8, 64, 1024} {
		stops := make([]string, total/length)
		for i := range stops {
			b := make([]byte, length)
			for j := range b {
				b[j] = byte(rng.IntN(256))
			}
			stops[i] = string(b)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		set := NewStopSet(stops)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64*total {
			t.Errorf("stop strings of %d bytes: %d nodes took %d bytes, more than 64 per byte of the %d", length, len(set.nodes), alloc, total)
		}
	}
}

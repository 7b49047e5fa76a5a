package structured

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

func TestForced(t *testing.T) {
	c := mustGBNF(t, `root ::= "{\"name\": \"" [a-z]+ "\", \"age\": " [0-9]+ "}"`)
	m := c.NewMatcher()
	if got := string(m.Forced(100)); got != `{"name": "` {
		t.Fatalf("forced at start: %q", got)
	}
	if got := string(m.Forced(3)); got != `{"n` {
		t.Fatalf("forced with max 3: %q", got)
	}
	m.AcceptString(`{"name": "bob`)
	if got := m.Forced(100); len(got) != 0 {
		t.Fatalf("forced inside a free string: %q", got)
	}
	m.AcceptString(`"`)
	if got := string(m.Forced(100)); got != `, "age": ` {
		t.Fatalf("forced after the string: %q", got)
	}
	if m.Len() != len(`{"name": "bob"`) {
		t.Fatalf("Forced changed the matcher: %d bytes", m.Len())
	}
	m.AcceptString(`, "age": 4`)
	m.AcceptString(`}`)
	if !m.Accepting() || len(m.Forced(10)) != 0 {
		t.Fatalf("complete output: accepting %v, forced %q", m.Accepting(), m.Forced(10))
	}
	// a choice forces its common prefix only
	g, _ := Choice([]string{"alpha", "alps"})
	cc, _ := Compile(g, DefaultLimits())
	if got := string(cc.NewMatcher().Forced(10)); got != "alp" {
		t.Fatalf("choice forced %q", got)
	}
}

func TestMaskerEOGAndSpecials(t *testing.T) {
	v := smallVocab()
	trie, err := NewTokenTrie(v)
	if err != nil {
		t.Fatal(err)
	}
	eog, special := int32(len(v.toks)-2), int32(len(v.toks)-1)
	c := mustGBNF(t, `root ::= "ab" "c"?`)
	k := NewTokenGrammar(c, trie, v).NewMasker()
	m := k.Mask()
	if m.Allows(eog) || m.Allows(special) {
		t.Fatal("EOG or a special token allowed at the start")
	}
	if err := k.Accept([]int32{eog}); err == nil {
		t.Fatal("EOG accepted at the start")
	}
	if err := k.Accept([]int32{special}); err == nil {
		t.Fatal("a special token accepted")
	}
	if err := k.Accept([]int32{'a', 'b'}); err != nil {
		t.Fatal(err)
	}
	m = k.Mask()
	if !m.Allows(eog) || !m.Allows('c') || m.Allows('a') || m.Allows(special) {
		t.Fatalf("after ab: eog %v c %v a %v", m.Allows(eog), m.Allows('c'), m.Allows('a'))
	}
	if err := k.Accept([]int32{'c'}); err != nil {
		t.Fatal(err)
	}
	if got := allowedIDs(k.Mask(), v.NumTokens()); len(got) != 1 || got[0] != eog || !k.Done() {
		t.Fatalf("a complete grammar admitting nothing more allows %v (done %v)", got, k.Done())
	}
	if err := k.Accept([]int32{eog}); err != nil {
		t.Fatal(err)
	}
	if err := k.Accept([]int32{'a'}); err == nil {
		t.Fatal("a token accepted after EOG")
	}
	k.Rollback(2)
	if got := k.Mask(); !got.Allows('c') || !got.Allows(eog) {
		t.Fatal("rollback over EOG did not restore the state")
	}
	if err := k.Accept([]int32{'x'}); err == nil {
		t.Fatal("a token outside the grammar accepted")
	}
}

func TestCache(t *testing.T) {
	v := smallVocab()
	trie, err := NewTokenTrie(v)
	if err != nil {
		t.Fatal(err)
	}
	var compiles atomic.Int32
	fe := func(src []byte) (*Grammar, error) {
		compiles.Add(1)
		return ParseGBNF(string(src))
	}
	cache := NewCache(2, DefaultLimits(), nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := cache.Get("gbnf", fe, []byte(`root ::= "a"`), trie, v); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if compiles.Load() != 1 {
		t.Fatalf("%d compiles of one grammar", compiles.Load())
	}
	_, err = cache.Get("gbnf", fe, []byte(`root ::= x`), trie, v)
	if err == nil {
		t.Fatal("a bad grammar compiled")
	}
	_, err2 := cache.Get("gbnf", fe, []byte(`root ::= x`), trie, v)
	if !errors.Is(err2, err) && err2.Error() != err.Error() || compiles.Load() != 2 {
		t.Fatalf("a failed compile is not cached: %v, %d compiles", err2, compiles.Load())
	}
	cache.Get("gbnf", fe, []byte(`root ::= "b"`), trie, v)
	if cache.Len() != 2 {
		t.Fatalf("cache of 2 holds %d", cache.Len())
	}
	cache.Get("gbnf", fe, []byte(`root ::= "a"`), trie, v) // evicted: compiles again
	if compiles.Load() != 4 {
		t.Fatalf("%d compiles, want 4 (LRU eviction)", compiles.Load())
	}

	// A check judges each compiled grammar once; what it refuses is a cached failure.
	var checks atomic.Int32
	refuse := errors.New("refused by the check")
	checked := NewCache(2, DefaultLimits(), func(g *TokenGrammar) error {
		checks.Add(1)
		if g.Compiled().Matches("b") {
			return refuse
		}
		return nil
	})
	for range 2 {
		if g, err := checked.Get("gbnf", fe, []byte(`root ::= "b"`), trie, v); g != nil || !errors.Is(err, refuse) {
			t.Fatalf("a grammar the check refuses: %v, %v", g, err)
		}
		if _, err := checked.Get("gbnf", fe, []byte(`root ::= "a"`), trie, v); err != nil {
			t.Fatal(err)
		}
	}
	if checks.Load() != 2 {
		t.Fatalf("%d checks of two grammars got twice each, want 2", checks.Load())
	}
}

func TestCompileLimits(t *testing.T) {
	lim := DefaultLimits()
	lim.DFAStates = 50
	g, err := ParseRegex(`[ab]*a[ab]{8}`) // the classic exponential DFA
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Compile(g, lim); err == nil || !contains(err.Error(), "automaton over 50 states") {
		t.Fatalf("DFA cap: %v", err)
	}
	lim = DefaultLimits()
	lim.Rules = 10
	g, _ = ParseGBNF(`root ::= ("(" root ")"){0,20} | "x"`)
	if _, err := Compile(g, lim); err == nil || !contains(err.Error(), "over 10 rules") {
		t.Fatalf("rule cap: %v", err)
	}
	lim = DefaultLimits()
	lim.Time = 1
	g, _ = ParseGBNF(jsonGBNF)
	if _, err := Compile(g, lim); err == nil || !contains(err.Error(), "longer than the limit") {
		t.Fatalf("time cap: %v", err)
	}
	g, _ = ParseGBNF(`root ::= "a" root`)
	if _, err := Compile(g, DefaultLimits()); err == nil || !contains(err.Error(), "matches no string") {
		t.Fatalf("unproductive grammar: %v", err)
	}
}

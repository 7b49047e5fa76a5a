package structured

import (
	"slices"
	"strings"
	"testing"
)

// lazyFixture is a lazy grammar of calls "<tool>{letters}" over smallVocab, and the ids
// of the vocabulary's tokens by text.
func lazyFixture(t *testing.T) (*Lazy, *TokenGrammar, map[string]int32) {
	t.Helper()
	v := smallVocab()
	g := NewTokenGrammar(mustGBNF(t, `root ::= "<tool>" "{" [a-z]+ "}"`), NewTokenTrieFrom(t, v), v)
	z, err := g.NewLazy([]string{"<tool>"})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int32{}
	for i, s := range v.toks {
		if _, ok := ids[s]; !ok {
			ids[s] = int32(i)
		}
	}
	return z, g, ids
}

// NewTokenTrieFrom builds the trie of a test vocabulary.
func NewTokenTrieFrom(t *testing.T, v Vocabulary) *TokenTrie {
	t.Helper()
	trie, err := NewTokenTrie(v)
	if err != nil {
		t.Fatal(err)
	}
	return trie
}

// chars returns the ids of text's characters, one token each.
func chars(ids map[string]int32, text string) []int32 {
	var out []int32
	for _, r := range text {
		out = append(out, ids[string(r)])
	}
	return out
}

// TestLazyFreeUntilTrigger: before the trigger every token is allowed, text the grammar
// would refuse included; the trigger (one token, or spelled out over several) hands the
// output to the grammar, whose mask is then the plain masker's after the trigger.
func TestLazyFreeUntilTrigger(t *testing.T) {
	for _, trigger := range [][]string{{"<tool>"}, {"<", "t", "o", "o", "l", ">"}} {
		z, g, ids := lazyFixture(t)
		if err := z.Accept(chars(ids, "Hi! 12 {x} < tool")); err != nil {
			t.Fatal(err)
		}
		if z.Mask() != nil || z.Triggered() {
			t.Fatalf("free output: mask %v, triggered %v", z.Mask() != nil, z.Triggered())
		}
		for i, piece := range trigger {
			if err := z.Accept([]int32{ids[piece]}); err != nil {
				t.Fatal(err)
			}
			if got := z.Triggered(); got != (i == len(trigger)-1) {
				t.Fatalf("trigger %q after %d pieces: triggered %v", trigger, i+1, got)
			}
		}
		want := g.NewMasker()
		if err := want.Accept([]int32{ids["<"], ids["t"], ids["o"], ids["o"], ids["l"], ids[">"]}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(z.Mask(), want.Mask()) {
			t.Fatalf("trigger %q: the mask after it is not the grammar's", trigger)
		}
		if err := z.Accept([]int32{ids["x"]}); err == nil {
			t.Fatal("a token the grammar refuses after the trigger was accepted")
		}
		if err := z.Accept(chars(ids, "{ab}")); err != nil {
			t.Fatal(err)
		}
		if !z.inner.Done() {
			t.Fatal("the call is complete but the grammar admits more")
		}
	}
}

// TestLazyTriggerAgain: rolled back past the token that completed the trigger, the output
// is free again, and the trigger accepted once more hands it over again.
func TestLazyTriggerAgain(t *testing.T) {
	z, _, ids := lazyFixture(t)
	if err := z.Accept(append(chars(ids, "<tool"), ids[">"])); err != nil || !z.Triggered() {
		t.Fatalf("%v, triggered %v", err, z.Triggered())
	}
	z.Rollback(1)
	if z.Triggered() || z.Mask() != nil {
		t.Fatal("rolled back past the trigger, still triggered")
	}
	if err := z.Accept([]int32{ids[" "]}); err != nil || z.Triggered() {
		t.Fatalf("free text after the rollback: %v, triggered %v", err, z.Triggered())
	}
	if err := z.Accept([]int32{ids["<tool>"], ids["{"]}); err != nil || !z.Triggered() {
		t.Fatalf("the trigger again: %v, triggered %v", err, z.Triggered())
	}
}

// TestLazyRefusedRemainder: the bytes after a trigger inside the token that completes it
// must fit the grammar, or the output stays free.
func TestLazyRefusedRemainder(t *testing.T) {
	v := smallVocab()
	v.toks = append(v.toks, "l>[]", "l>{a")
	g := NewTokenGrammar(mustGBNF(t, `root ::= "<tool>" "{" [a-z]+ "}"`), NewTokenTrieFrom(t, v), v)
	for _, c := range []struct {
		last string
		want bool
	}{{"l>[]", false}, {"l>{a", true}} {
		z, err := g.NewLazy([]string{"<tool>"})
		if err != nil {
			t.Fatal(err)
		}
		toks := []int32{'<', 't', 'o', 'o', int32(slices.Index(v.toks, c.last))}
		if err := z.Accept(toks); err != nil {
			t.Fatal(err)
		}
		if z.Triggered() != c.want {
			t.Errorf("%q after <too: triggered %v, want %v", c.last, z.Triggered(), c.want)
		}
		if c.want {
			if err := z.Accept([]int32{'b', '}'}); err != nil {
				t.Errorf("the call's rest: %v", err)
			}
		}
	}
}

// TestLazyRollbackAndClone: rolling back inside the grammar and past the trigger restores
// each state; a clone does not share it.
func TestLazyRollbackAndClone(t *testing.T) {
	z, _, ids := lazyFixture(t)
	toks := append(chars(ids, "ok "), ids["<tool>"])
	toks = append(toks, chars(ids, "{ab")...)
	if err := z.Accept(toks); err != nil {
		t.Fatal(err)
	}
	c := z.Clone().(*Lazy)
	z.Rollback(2)
	if !z.Triggered() || z.inner.m.Len() != len("<tool>{") {
		t.Fatalf("rolled back 2 inside the call: triggered %v", z.Triggered())
	}
	z.Rollback(2)
	if z.Triggered() || string(z.text) != "ok " {
		t.Fatalf("rolled back past the trigger: triggered %v, text %q", z.Triggered(), z.text)
	}
	if z.Mask() != nil {
		t.Fatal("free again, but masked")
	}
	if !c.Triggered() || c.inner.m.Len() != len("<tool>{ab") {
		t.Fatal("the clone moved with the original")
	}
	if err := c.Accept([]int32{ids["}"]}); err != nil {
		t.Fatal(err)
	}
}

// TestNewLazyRefuses: no trigger, an empty one, or one the grammar's strings do not begin
// with.
func TestNewLazyRefuses(t *testing.T) {
	_, g, _ := lazyFixture(t)
	for _, triggers := range [][]string{nil, {""}, {"<call>"}, {"<tool>", "{"}} {
		if _, err := g.NewLazy(triggers); err == nil || !strings.Contains(err.Error(), "trigger") {
			t.Errorf("triggers %q: %v, want an error about the trigger", triggers, err)
		}
	}
}

// TestLazyEndOfGenerationWhileFree: free, an end-of-generation token is taken like text.
func TestLazyEndOfGenerationWhileFree(t *testing.T) {
	z, _, ids := lazyFixture(t)
	if err := z.Accept(append(chars(ids, "done"), ids["</s>"])); err != nil || z.Triggered() {
		t.Fatalf("%v, triggered %v", err, z.Triggered())
	}
}

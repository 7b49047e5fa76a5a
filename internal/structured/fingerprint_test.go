package structured

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestWriteFingerprints (KVASIR_FINGERPRINT_OUT=file) writes, for every grammar of
// fragmentGrammars (KVASIR_GBNF_DIR included), its number of terminals and each terminal's
// automaton as a canonical fingerprint (see dfaFingerprint), so that two versions of the
// compiler can be compared: `diff` of their files shows any grammar whose terminals change.
func TestWriteFingerprints(t *testing.T) {
	out := os.Getenv("KVASIR_FINGERPRINT_OUT")
	if out == "" {
		t.Skip("set KVASIR_FINGERPRINT_OUT")
	}
	lim := DefaultLimits()
	lim.Time = time.Minute
	grammars := fragmentGrammars(t)
	var names []string
	for name := range grammars {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		c, err := Compile(grammars[name], lim)
		if err != nil {
			fmt.Fprintf(&b, "%s: error %v\n", name, err)
			continue
		}
		fmt.Fprintf(&b, "%s: %d terminals, %d rules\n", name, len(c.terms), len(c.rules))
		for i, d := range c.terms {
			fmt.Fprintf(&b, "  %d: %s\n", i, dfaFingerprint(d))
		}
	}
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// dfaFingerprint returns d's state count and a hash of its transitions with the states
// numbered in breadth-first order from the start, bytes in order: two minimal automata of
// one language (unique up to the numbering of states and byte classes) get the same one.
func dfaFingerprint(d *dfa) string {
	id := map[uint32]uint64{0: 0}
	order := []uint32{d.start}
	id[d.start] = 1
	h := uint64(fnvOffset)
	mix := func(v uint64) { h = (h ^ v) * 1099511628211 }
	for i := 0; i < len(order); i++ {
		q := order[i]
		if d.accept[q] {
			mix(1)
		} else {
			mix(2)
		}
		for b := range 256 {
			t := d.step(q, byte(b))
			if _, ok := id[t]; !ok {
				id[t] = uint64(len(id))
				order = append(order, t)
			}
			mix(id[t])
		}
	}
	return fmt.Sprintf("%d states %016x", d.numStates(), h)
}

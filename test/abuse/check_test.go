//go:build linux

package abuse

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// check collects one case's failures, so that a pending case (pending_test.go) can be
// skipped with them instead of failing the suite.
type check struct {
	t        *testing.T
	failures []string
}

// stopCase is what Fatalf panics with to end a case; runCase recovers it.
type stopCase struct{}

// Errorf records a failure and lets the case go on.
func (c *check) Errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.failures = append(c.failures, msg)
	c.t.Log("FAIL: " + msg)
}

// Fatalf records a failure and ends the case.
func (c *check) Fatalf(format string, args ...any) {
	c.Errorf(format, args...)
	panic(stopCase{})
}

// Logf logs a figure of the case.
func (c *check) Logf(format string, args ...any) { c.t.Logf(format, args...) }

// strict reports whether KVASIR_ABUSE_STRICT=1 asks every case to pass, pending or not.
func strict() bool { return os.Getenv("KVASIR_ABUSE_STRICT") == "1" }

// runCase runs fn as the subtest name of t and reports whether it passed. A case listed in
// pending that fails is skipped with its failures; one that passes fails, so that the
// list cannot go stale.
func runCase(t *testing.T, name string, fn func(c *check)) bool {
	t.Helper()
	passed := false
	t.Run(name, func(t *testing.T) {
		c := &check{t: t}
		func() {
			defer func() {
				if p := recover(); p != nil {
					if _, ok := p.(stopCase); !ok {
						panic(p)
					}
				}
			}()
			fn(c)
		}()
		passed = len(c.failures) == 0
		who, isPending := pending[t.Name()]
		switch {
		case isPending && !strict() && passed:
			t.Errorf("this case passes now: delete its entry (%s) from pending in pending_test.go", who)
		case isPending && !strict():
			t.Skipf("pending (%s): %d failure(s), first: %s", who, len(c.failures), c.failures[0])
		case !passed:
			t.Errorf("%d failure(s):\n%s", len(c.failures), strings.Join(c.failures, "\n"))
		}
	})
	return passed
}

//go:build linux

package abuse

import (
	"fmt"
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

// runCase runs fn as the subtest name of t and reports whether it passed.
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
		if !passed {
			t.Errorf("%d failure(s):\n%s", len(c.failures), strings.Join(c.failures, "\n"))
		}
	})
	return passed
}

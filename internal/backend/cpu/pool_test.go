package cpu

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestPoolRun runs many loops of varied sizes, with pauses long enough for the workers to
// go to sleep, and checks that every index is visited exactly once per loop.
func TestPoolRun(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 4} {
		p := testPool(threads)
		for i := range 2000 {
			n := i%37 + 1
			var sum, calls atomic.Int64
			p.Run(n, func(start, end int) {
				calls.Add(1)
				for j := start; j < end; j++ {
					sum.Add(int64(j + 1))
				}
			})
			if got, want := sum.Load(), int64(n*(n+1)/2); got != want {
				t.Fatalf("threads %d loop %d: sum %d want %d", threads, i, got, want)
			}
			if i%200 == 0 {
				time.Sleep(2 * poolSpin)
			}
		}
		p.Close()
		ran := false
		p.Run(5, func(start, end int) { ran = true })
		if !ran {
			t.Fatalf("threads %d: Run after Close did nothing", threads)
		}
	}
}

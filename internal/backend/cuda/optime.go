package cuda

import (
	"fmt"
	"io"
	"math/bits"
	"sort"
	"strings"
	"time"
)

// opTimes is a coarse profiler of a device's stream work, for finding where a step's time
// goes without a tracing tool: with DeviceOptions.OpTime (KVASIR_CUDA_OPTIME=1) every
// kernel launch, cuBLAS GEMM and graph replay outside a capture is bracketed by stream
// synchronizations and its host-measured time is added up by name; decode steps then run eagerly (no graphs), op by
// op. The synchronizations serialize the host with the device, so each figure is the op's
// launch cost plus its device time, and the wall time not covered by ops is host work (the
// model, the scheduler, copies, loading). The device reports the table to stderr when it
// closes. It is touched only by the device goroutine.
type opTimes struct {
	start     time.Time
	capturing bool
	byName    map[string]*opTime
}

// opTime is one op name's count and total time.
type opTime struct {
	n             int
	d, first, min time.Duration
}

// newOpTimes returns an empty profile started now.
func newOpTimes() *opTimes { return &opTimes{start: time.Now(), byName: map[string]*opTime{}} }

// timed runs fn, one op called name, and adds its time to the device's profile when one is
// being kept (inside Do).
func (dv *Device) timed(name string, fn func() error) error {
	t := dv.times
	if t == nil || t.capturing {
		return fn()
	}
	if err := dv.Sync(); err != nil {
		return err
	}
	t0 := time.Now()
	err := fn()
	if serr := dv.Sync(); err == nil {
		err = serr
	}
	e := t.byName[name]
	if e == nil {
		e = &opTime{}
		t.byName[name] = e
	}
	d := time.Since(t0)
	if e.n == 0 {
		e.first, e.min = d, d
	}
	e.n++
	e.d += d
	e.min = min(e.min, d)
	return err
}

// pow2Bucket rounds n up to a power of two, so that GEMMs of similar row counts share a
// profile line.
func pow2Bucket(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// report writes the profile, largest total first, to w.
func (t *opTimes) report(w io.Writer) {
	type line struct {
		name string
		opTime
	}
	var lines []line
	var sum time.Duration
	for k, v := range t.byName {
		lines = append(lines, line{k, *v})
		sum += v.d
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].d > lines[j].d })
	wall := time.Since(t.start)
	var b strings.Builder
	fmt.Fprintf(&b, "cuda op times (KVASIR_CUDA_OPTIME): %.1f ms in ops of %.1f ms wall since the device opened\n",
		sum.Seconds()*1e3, wall.Seconds()*1e3)
	for _, l := range lines {
		rest := "-" // the mean of the calls after the first, which may load code lazily
		if l.n > 1 {
			rest = fmt.Sprintf("%.1f us", (l.d-l.first).Seconds()*1e6/float64(l.n-1))
		}
		fmt.Fprintf(&b, "OPTIME|%s|%d|%.3f ms|first %.1f us|then %s|min %.1f us\n", l.name, l.n, l.d.Seconds()*1e3,
			l.first.Seconds()*1e6, rest, l.min.Seconds()*1e6)
	}
	io.WriteString(w, b.String())
}

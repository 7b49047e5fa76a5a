package hub

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows one file's download as a byte progress bar. A nil *progress shows nothing.
type progress struct {
	bar *progressbar.ProgressBar
	w   io.Writer
}

// newProgress starts a bar on w for a file of total bytes (-1 when unknown) of which start
// bytes are already there; a resumed download shows only the bytes still to come, so that
// the rate and time left are right. It returns nil when w is nil.
func newProgress(w io.Writer, name string, total, start int64) *progress {
	if w == nil || total == 0 || total == start {
		return nil
	}
	if start > 0 && total > 0 {
		total -= start
		name += " (resumed)"
	}
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(name),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionSetWidth(24),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionShowCount(),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetSpinnerChangeInterval(0), // no ticker goroutine for unknown sizes
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)
	return &progress{bar: bar, w: w}
}

// Write counts len(b) bytes as done; it never fails, so it can sit in an io.MultiWriter.
func (p *progress) Write(b []byte) (int, error) {
	if p != nil {
		p.bar.Add(len(b))
	}
	return len(b), nil
}

// finish completes the bar (ok) or leaves it where it stopped.
func (p *progress) finish(ok bool) {
	if p == nil {
		return
	}
	if ok {
		p.bar.Finish()
		return
	}
	p.bar.Exit()
}

// notef writes a line of information to w, if any.
func notef(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

package main

import (
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress is a progress bar on standard error for long writes and uploads.
type progress struct {
	bar *progressbar.ProgressBar
}

// newProgress returns a bar for total bytes; when quiet it draws nothing.
func newProgress(label string, total int64, quiet bool) *progress {
	if quiet {
		return &progress{}
	}
	return &progress{bar: progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription(label),
		progressbar.OptionShowBytes(true),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)}
}

// Update is told the bytes done so far; it fits the writers' progress callbacks.
func (p *progress) Update(done, total int64) {
	if p.bar != nil {
		p.bar.Set64(done)
	}
}

// Finish removes the bar.
func (p *progress) Finish() {
	if p.bar != nil {
		p.bar.Finish()
	}
}

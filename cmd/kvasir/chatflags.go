package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/chat"
)

// chatTemplateFlags are serve's limits on one render of the chat template.
type chatTemplateFlags struct {
	timeout                        time.Duration
	maxDepth, workers              int
	maxIterations                  int64
	maxOutput, maxStack, maxMemory string
}

// addChatTemplateFlags adds the chat template limits to fs.
func addChatTemplateFlags(fs *flag.FlagSet) *chatTemplateFlags {
	f := &chatTemplateFlags{}
	fs.DurationVar(&f.timeout, "chat-template-timeout", chat.DefaultTimeout, "render deadline of the chat template (its sandbox worker is killed past it; the request gets 400)")
	fs.IntVar(&f.maxDepth, "chat-template-max-depth", chat.DefaultMaxDepth, "most nested macro calls in one chat template render")
	fs.Int64Var(&f.maxIterations, "chat-template-max-iterations", chat.DefaultMaxIterations, "most for-loop iterations in one chat template render, all loops together")
	fs.StringVar(&f.maxOutput, "chat-template-max-output", mib(chat.DefaultMaxOutputBytes), "longest rendered chat prompt")
	fs.StringVar(&f.maxStack, "chat-template-max-stack", mib(chat.DefaultMaxStackBytes), "largest stack of a chat template render (bounds recursion the depth count does not see)")
	fs.StringVar(&f.maxMemory, "chat-template-max-memory", mib(chat.DefaultMaxMemoryBytes), "memory a chat template sandbox worker may take")
	fs.IntVar(&f.workers, "chat-template-workers", chat.DefaultWorkers, "chat template sandbox workers rendering at once")
	return f
}

// mib writes a whole number of MiB as a flag default.
func mib(n int64) string { return fmt.Sprintf("%dMiB", n>>20) }

// limits reads the flags; every one must be positive.
func (f *chatTemplateFlags) limits() (chat.Limits, int, error) {
	l := chat.Limits{MaxDepth: f.maxDepth, MaxIterations: f.maxIterations, Timeout: f.timeout}
	for _, b := range []struct {
		name string
		text string
		v    *int64
	}{{"chat-template-max-output", f.maxOutput, &l.MaxOutputBytes}, {"chat-template-max-stack", f.maxStack, &l.MaxStackBytes},
		{"chat-template-max-memory", f.maxMemory, &l.MaxMemoryBytes}} {
		n, err := kvasir.ParseBytes(b.text)
		if err != nil {
			return chat.Limits{}, 0, fmt.Errorf("--%s: %w", b.name, err)
		}
		*b.v = n
	}
	for _, c := range []struct {
		name string
		v    int64
	}{{"chat-template-timeout", int64(l.Timeout)}, {"chat-template-max-depth", int64(l.MaxDepth)},
		{"chat-template-max-iterations", l.MaxIterations}, {"chat-template-max-output", l.MaxOutputBytes},
		{"chat-template-max-stack", l.MaxStackBytes}, {"chat-template-max-memory", l.MaxMemoryBytes},
		{"chat-template-workers", int64(f.workers)}} {
		if c.v <= 0 {
			return chat.Limits{}, 0, fmt.Errorf("--%s must be positive", c.name)
		}
	}
	return l, f.workers, nil
}

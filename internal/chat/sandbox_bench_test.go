package chat

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// benchmarkRender renders the basic conversation with Qwen3's template b.N times and
// reports the median render time as p50-µs.
func benchmarkRender(b *testing.B, load func(src string) *Template) {
	src, err := os.ReadFile(testdata.Path(b, "chat_templates/Qwen-Qwen3-0.6B.jinja"))
	if err != nil {
		b.Fatal(err)
	}
	tmpl := load(string(src))
	in := Input{Messages: basicConversation(), AddGenerationPrompt: true, Now: fixedNow}
	times := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		if _, err := tmpl.Render(in); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1e3, "p50-µs")
}

// BenchmarkRenderInProcess renders in this process.
func BenchmarkRenderInProcess(b *testing.B) {
	benchmarkRender(b, func(src string) *Template {
		tmpl, err := New(src)
		if err != nil {
			b.Fatal(err)
		}
		return tmpl
	})
}

// BenchmarkRenderSandboxed renders in a warm sandbox worker.
func BenchmarkRenderSandboxed(b *testing.B) {
	sb := newTestSandbox(b, SandboxConfig{Workers: 1})
	benchmarkRender(b, func(src string) *Template {
		tmpl, err := sb.Load(context.Background(), src)
		if err != nil {
			b.Fatal(err)
		}
		return tmpl
	})
}

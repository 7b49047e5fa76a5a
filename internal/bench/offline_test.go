package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// storiesEngine opens an engine on the stories260K checkpoint (512-token context).
func storiesEngine(t *testing.T, opt kvasir.Options) *kvasir.Engine {
	t.Helper()
	opt.Tokenizer, opt.Threads = testdata.Path(t, "models/stories260K/tok512.bin"), 2
	e, err := kvasir.Open(testdata.Path(t, "models/stories260K/stories260K.bin"), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestOfflineRandom: random prompts share their prefix, every request completes with its
// output length, the prefix cache serves the shared prefix, and the per-request lists and
// totals agree.
func TestOfflineRandom(t *testing.T) {
	e := storiesEngine(t, kvasir.Options{KVCacheMemory: 8 << 20})
	o := OfflineOptions{NumPrompts: 6, InputLen: 5, PrefixLen: 32, OutputLen: 7, Seed: 3, Concurrency: 2}
	reqs, err := OfflineRequests(context.Background(), e, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 6 {
		t.Fatalf("%d requests, want 6", len(reqs))
	}
	for i, r := range reqs {
		if len(r.Prompt) != 37 || r.MaxTokens != 7 || !slices.Equal(r.Prompt[:32], reqs[0].Prompt[:32]) {
			t.Errorf("request %d: %d prompt tokens (want 32 shared + 5), max tokens %d", i, len(r.Prompt), r.MaxTokens)
		}
	}
	res := Offline(context.Background(), e, reqs, o.Concurrency, kvasir.SamplingParams{IgnoreEOS: true})
	if res.Completed != 6 || res.Failed != 0 || res.MaxConcurrency != 2 || res.TotalInputTokens != 6*37 || res.TotalOutputTokens != 6*7 {
		t.Errorf("result %+v", res)
	}
	if len(res.InputLens) != 6 || len(res.OutputLens) != 6 || len(res.TTFTs) != 6 || res.OutputLens[5] != 7 || res.InputLens[5] != 37 || res.TTFTs[5] <= 0 {
		t.Errorf("per-request lists %v %v %v", res.InputLens, res.OutputLens, res.TTFTs)
	}
	if res.PrefixCacheHitRate <= 0 {
		t.Errorf("no prefix cache hit on 32 shared tokens: %+v", res)
	}
	if res.MeanTTFTms <= 0 || res.P99E2ELms < res.MedianE2ELms || res.MeanTPOTms <= 0 || res.OutputThroughput <= 0 {
		t.Errorf("latencies %+v", res)
	}
}

// TestOfflineShareGPT: ShareGPT first turns are tokenized as the engine does, a
// conversation without a reply gets --output-len, and requests beyond the context are left
// out with a note.
func TestOfflineShareGPT(t *testing.T) {
	e := storiesEngine(t, kvasir.Options{KVCacheMemory: 8 << 20})
	long := strings.Repeat("a story about a cat ", 200)
	data, err := json.Marshal([]map[string]any{
		{"conversations": []map[string]string{{"from": "human", "value": "Once upon a time"}}},
		{"conversations": []map[string]string{{"from": "human", "value": long}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sharegpt.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var note bytes.Buffer
	reqs, err := OfflineRequests(context.Background(), e, OfflineOptions{NumPrompts: 2, OutputLen: 9, DatasetPath: path}, &note)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := e.Tokenize("Once upon a time", true)
	if len(reqs) != 1 || !slices.Equal(reqs[0].Prompt, want) || reqs[0].MaxTokens != 9 {
		t.Fatalf("requests %+v, want the short prompt %v with 9 tokens", reqs, want)
	}
	if !strings.Contains(note.String(), "1 of 2 requests do not fit the 512-token context") {
		t.Errorf("note %q", note.String())
	}
	if _, err := OfflineRequests(context.Background(), e, OfflineOptions{NumPrompts: 2, OutputLen: 600, DatasetPath: path}, nil); err == nil {
		t.Error("a workload of which nothing fits was accepted")
	}
}

// TestWriteOfflineSummary: the text report keeps its layout.
func TestWriteOfflineSummary(t *testing.T) {
	var b bytes.Buffer
	WriteOfflineSummary(&b, OfflineResult{Completed: 3, Duration: 1.5, MeanTTFTms: 12.345, P99ITLms: 7})
	out := b.String()
	for _, line := range []string{
		"============ Offline Benchmark Result ============\n",
		"Successful requests:                              3\n",
		"Benchmark duration (s):                        1.50\n",
		"-------------- Time to First Token ---------------\nMean (ms):                                    12.35\n",
		"---- Time per Output Token (excl. 1st token) -----\n",
		"-------------- Inter-token Latency ---------------\nMean (ms):                                     0.00\nMedian (ms):                                   0.00\nP99 (ms):                                      7.00\n",
		"--------------- End-to-end Latency ---------------\n",
		"==================================================\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("summary lacks %q:\n%s", line, out)
		}
	}
}

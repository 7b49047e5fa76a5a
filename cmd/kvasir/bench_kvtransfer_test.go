package main

import (
	"encoding/json"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestBenchKVTransfer: `kvasir bench kvtransfer --json` on stories260K measures every round
// of both ways of streaming, the layer way with every (block, layer) part sent as computed
// and the chunk way with none, and a tail after the prefill shorter than the TTFT.
func TestBenchKVTransfer(t *testing.T) {
	m := testdata.Path(t, "models/stories260K/stories260K.gguf")
	out := captureStdout(t, func() error {
		return runBench([]string{"kvtransfer", "-m", m, "--prompt-len", "100", "--rounds", "2", "--kv-transfer-chunk", "32", "--threads", "1", "--json"})
	})
	var res kvTransferResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for name, md := range map[string]kvTransferMode{"layers": res.Layers, "chunks": res.Chunks} {
		if len(md.TTFT) != 2 || len(md.Tail) != 2 || md.Parts == 0 || md.TailMedian <= 0 || md.TailMedian >= md.TTFTMedian {
			t.Errorf("%s: %+v", name, md)
		}
	}
	if res.Layers.Streamed != res.Layers.Parts || res.Chunks.Streamed != 0 {
		t.Errorf("parts streamed as computed: layers %d of %d, chunks %d", res.Layers.Streamed, res.Layers.Parts, res.Chunks.Streamed)
	}
	if err := runBench([]string{"kvtransfer", "-m", m, "--rounds", "0"}); err == nil {
		t.Error("--rounds 0 accepted")
	}
}

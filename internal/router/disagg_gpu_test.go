package router

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
	kvbackend "github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/backend/cudabackend"
	"github.com/kvasir-llm/kvasir/internal/kvtransfer"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/server"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// gpuDisaggEngine starts an engine on a small synthesized llama-3.2-1b-shaped BF16 model
// (4 layers) on CUDA device 0, or skips the test when there is no CUDA driver or device.
func gpuDisaggEngine(t *testing.T) *kvasir.Engine {
	t.Helper()
	if _, n, err := cuda.Devices(); n == 0 {
		t.Skipf("skipping GPU test: no CUDA device (%v)", err)
	}
	be, err := cudabackend.NewBackend(cudabackend.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	shape, err := synth.Lookup("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	shape.Config.Layers, shape.Config.VocabSize = 4, 512
	fm, err := synth.Model(shape, quant.BF16, 3)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kvasir.OpenModel(fm, kvasir.Options{Backends: []kvbackend.Backend{be}, Device: kvasir.Device{CUDA: true}, KVCacheMemory: 256 << 20, MaxModelLen: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestDisaggGPU: a GPU prefill instance (kvasir serve --role prefill, its prompt computed in
// chunks of two blocks) streams a prompt's KV to a receiver of a GPU decode engine, in the
// frames of every (block, layer), each layer as it is computed (or each chunk once
// computed); the decode engine admitted with those blocks generates the greedy tokens of a
// colocated GPU engine token for token without computing them, with each way of
// streaming, and every cache is empty afterwards.
func TestDisaggGPU(t *testing.T) {
	colo, pre, dec := gpuDisaggEngine(t), gpuDisaggEngine(t), gpuDisaggEngine(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := kvtransfer.Listen(ln, kvtransfer.ReceiverConfig{Model: dec.ModelName(), BlockSize: dec.BlockSize(), BlockBytes: dec.BlockBytes(),
		Layers: dec.BlockLayers(), KVCacheDType: dec.KVCacheDType(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	greedyIDs := func(e *kvasir.Engine, prompt []int32, imp *kvasir.KVImport) ([]int32, kvasir.Usage) {
		ch, err := e.Generate(context.Background(), kvasir.Request{PromptTokens: prompt, Params: kvasir.SamplingParams{MaxTokens: 24, IgnoreEOS: true}, ImportKV: imp})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int32
		var last kvasir.Output
		for o := range ch {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			ids = append(ids, o.TokenIDs...)
			last = o
		}
		return ids, last.Usage
	}
	for k, chunks := range []bool{false, true} {
		srv, err := server.New(pre, server.Config{Role: server.RolePrefill, Logger: log, KVPrefillChunk: 2 * pre.BlockSize(), KVStreamChunks: chunks,
			KVSender: &kvtransfer.Sender{Timeout: 10 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(srv)
		prompt := make([]int32, 101) // 6 full blocks of 16 and a tail
		for i := range prompt {
			prompt[i] = int32(3 + (i*37+k*11)%500)
		}
		want, _ := greedyIDs(colo, prompt, nil)
		id := []string{"gpu-layers", "gpu-chunks"}[k]
		var res struct {
			NumBlocks      int `json:"num_blocks"`
			LayersStreamed int `json:"layers_streamed"`
		}
		if status := postPrefill(t, ts.URL, id, rc.Addr().String(), prompt, &res); status != http.StatusOK || res.NumBlocks != len(prompt)/pre.BlockSize() {
			t.Fatalf("stream chunks %v: prefill status %d, %d blocks", chunks, status, res.NumBlocks)
		}
		// Every chunk's blocks are new to the prefill engine: streaming layers, the hook
		// brings every part (copied on the side stream while the next layers compute).
		if want := map[bool]int{false: res.NumBlocks * pre.BlockLayers(), true: 0}[chunks]; res.LayersStreamed != want {
			t.Errorf("stream chunks %v: %d (block, layer) parts streamed as computed, want %d", chunks, res.LayersStreamed, want)
		}
		got, ok := rc.Take(id)
		if !ok {
			t.Fatalf("stream chunks %v: the transfer is not held", chunks)
		}
		ids, usage := greedyIDs(dec, prompt, &kvasir.KVImport{Hashes: got.Hashes, Data: got.Data})
		if !slices.Equal(ids, want) {
			t.Errorf("stream chunks %v: disaggregated %v, colocated %v", chunks, ids, want)
		}
		if usage.CachedPromptTokens != res.NumBlocks*pre.BlockSize() {
			t.Errorf("stream chunks %v: %d prompt tokens cached on the decode engine, want the %d transferred", chunks, usage.CachedPromptTokens, res.NumBlocks*pre.BlockSize())
		}
		ts.Close()
		srv.Close()
	}
	for name, e := range map[string]*kvasir.Engine{"colocated": colo, "prefill": pre, "decode": dec} {
		waitFor(t, 5*time.Second, name+" KV usage back to 0", func() bool { return e.Stats().UsedBlocks == 0 })
	}
}

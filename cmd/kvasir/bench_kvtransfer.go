package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/kvtransfer"
	"github.com/kvasir-llm/kvasir/internal/server"
)

func init() {
	registerBench(benchmark{name: "kvtransfer", summary: "decode-side TTFT through a prefill and a decode instance: KV streamed layer by layer against chunk by chunk", run: benchKVTransfer})
}

// kvTransferResult is bench kvtransfer's summary.
type kvTransferResult struct {
	Model     string `json:"model"`
	PromptLen int    `json:"prompt_len"`
	Chunk     int    `json:"kv_transfer_chunk"`
	Rounds    int    `json:"rounds"`
	// Layers and Chunks are the two ways of streaming, measured alternately.
	Layers kvTransferMode `json:"layers"`
	Chunks kvTransferMode `json:"chunks"`
	// Speedup is the chunk mode's median TTFT over the layer mode's, TailSpeedup the same
	// of the tails.
	Speedup     float64 `json:"ttft_speedup"`
	TailSpeedup float64 `json:"tail_speedup"`
}

// kvTransferMode is one way of streaming's measurements, one entry a round.
type kvTransferMode struct {
	// TTFT is from the prefill call to the decode instance's first token; Prefill the
	// prefill instance's compute of the prompt (its prefill_ms); Tail their difference:
	// what the transfer, the import and the decode instance's own tokens add after the
	// prompt is computed.
	TTFT    []float64 `json:"ttft_s"`
	Prefill []float64 `json:"prefill_s"`
	Tail    []float64 `json:"tail_s"`
	// Streamed is the last round's (block, layer) parts sent as their layer was computed,
	// of Parts.
	Streamed int `json:"layers_streamed"`
	Parts    int `json:"parts"`
	// TTFTMedian and TailMedian are the medians.
	TTFTMedian float64 `json:"ttft_median_s"`
	TailMedian float64 `json:"tail_median_s"`
}

// benchKVTransfer runs a prefill and a decode instance in process, on loopback, and
// measures the decode side's TTFT for random prompts whose KV the prefill instance streams
// layer by layer as computed and chunk by chunk, alternating the two.
func benchKVTransfer(args []string) error {
	fs := newFlags("bench kvtransfer", "-m MODEL [--prompt-len 2000] [--rounds 3] [--kv-transfer-chunk 512] [--json]")
	promptLen := fs.Int("prompt-len", 2000, "tokens of each prompt (random, new to both instances)")
	outLen := fs.Int("output-len", 4, "tokens generated per request (TTFT is to the first)")
	rounds := fs.Int("rounds", 3, "prompts measured per way of streaming (alternating which goes first)")
	chunk := fs.Int("kv-transfer-chunk", server.DefaultPrefillChunk, "the prefill instance's --kv-transfer-chunk")
	timeout := fs.Duration("kv-transfer-timeout", kvtransfer.DefaultTimeout, "both instances' --kv-transfer-timeout (a loaded machine may need more)")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	ef := addEngineFlags(fs, allEngineFlags)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if ef.model == "" || fs.NArg() > 0 || *promptLen < 1 || *rounds < 1 || *outLen < 1 || *chunk < 1 || *timeout <= 0 {
		fs.Usage()
		return fmt.Errorf("need -m (and positive lengths, chunk, rounds and timeout)")
	}
	open := func() (*kvasir.Engine, error) {
		return ef.openEngine(func(opt *kvasir.Options, fm *format.Model) {
			if opt.MaxModelLen == 0 {
				opt.MaxModelLen = *promptLen + *outLen + 64
			}
		})
	}
	pre, err := open()
	if err != nil {
		return err
	}
	defer pre.Close()
	dec, err := open()
	if err != nil {
		return err
	}
	defer dec.Close()
	fmt.Fprintln(os.Stderr, dec.KVCacheSizing())
	if !pre.StreamsLayers() {
		fmt.Fprintln(os.Stderr, "warning: this model's backend does not report KV layer by layer: both ways send chunks")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	rc, err := kvtransfer.Listen(ln, kvtransfer.ReceiverConfig{Model: dec.ModelName(), BlockSize: dec.BlockSize(), BlockBytes: dec.BlockBytes(),
		Layers: dec.BlockLayers(), KVCacheDType: dec.KVCacheDType(), KVLayout: dec.KVLayout(), MaxHeldBytes: 4 << 30, Timeout: *timeout, Logger: log})
	if err != nil {
		ln.Close()
		return err
	}
	defer rc.Close()
	var urls [3]string // decode, prefill by layers, prefill by chunks
	for i, cfg := range []server.Config{
		{Role: server.RoleDecode, KVReceiver: rc, KVTransferAddress: ln.Addr().String()},
		{Role: server.RolePrefill, KVPrefillChunk: *chunk, KVSender: &kvtransfer.Sender{Timeout: *timeout}},
		{Role: server.RolePrefill, KVPrefillChunk: *chunk, KVStreamChunks: true, KVSender: &kvtransfer.Sender{Timeout: *timeout}},
	} {
		cfg.Logger = log
		eng := pre
		if i == 0 {
			eng = dec
		}
		url, stop, err := serveLoopback(eng, cfg)
		if err != nil {
			return err
		}
		defer stop()
		urls[i] = url
	}
	res := kvTransferResult{Model: dec.ModelName(), PromptLen: *promptLen, Chunk: *chunk, Rounds: *rounds}
	rng := rand.New(rand.NewPCG(20, 12))
	vocab := int32(dec.VocabSize())
	prompt := func(n int) []int32 {
		t := make([]int32, n)
		for i := range t {
			t[i] = rng.Int32N(vocab)
		}
		return t
	}
	modes := []*kvTransferMode{&res.Layers, &res.Chunks}
	// A short warm-up of each way first (first requests pay one-time costs).
	for m := range modes {
		if _, err := disaggTTFT(urls[0], urls[1+m], fmt.Sprintf("warm-%d", m), prompt(4*dec.BlockSize()+1), 1); err != nil {
			return err
		}
	}
	for r := range *rounds {
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		for _, m := range order {
			got, err := disaggTTFT(urls[0], urls[1+m], fmt.Sprintf("round-%d-%d", r, m), prompt(*promptLen), *outLen)
			if err != nil {
				return err
			}
			md := modes[m]
			md.TTFT, md.Prefill = append(md.TTFT, got.ttft.Seconds()), append(md.Prefill, got.prefill.Seconds())
			md.Tail = append(md.Tail, (got.ttft - got.prefill).Seconds())
			md.Streamed, md.Parts = got.streamed, got.blocks*dec.BlockLayers()
			fmt.Fprintf(os.Stderr, "round %d %s: TTFT %.3f s, prefill %.3f s, tail %.1f ms\n", r, []string{"layers", "chunks"}[m],
				got.ttft.Seconds(), got.prefill.Seconds(), 1e3*(got.ttft-got.prefill).Seconds())
		}
	}
	for _, md := range modes {
		md.TTFTMedian, md.TailMedian = median(md.TTFT), median(md.Tail)
	}
	if res.Layers.TTFTMedian > 0 && res.Layers.TailMedian > 0 {
		res.Speedup, res.TailSpeedup = res.Chunks.TTFTMedian/res.Layers.TTFTMedian, res.Chunks.TailMedian/res.Layers.TailMedian
	}
	if *asJSON {
		return printJSON(res)
	}
	fmt.Printf("model %s, prompts of %d tokens, chunks of %d, %d rounds\n", res.Model, res.PromptLen, res.Chunk, res.Rounds)
	for i, md := range modes {
		fmt.Printf("%-6s TTFT median %.3f s %v; tail after the prefill median %.1f ms %v; %d of %d parts streamed as computed\n",
			[]string{"layers", "chunks"}[i], md.TTFTMedian, msList(md.TTFT), 1e3*md.TailMedian, msList(md.Tail), md.Streamed, md.Parts)
	}
	fmt.Printf("chunks/layers: TTFT %.3fx, tail %.2fx\n", res.Speedup, res.TailSpeedup)
	return nil
}

// serveLoopback serves a server of eng with cfg on a loopback port, returning its URL and
// a func that stops it.
func serveLoopback(eng *kvasir.Engine, cfg server.Config) (string, func(), error) {
	srv, err := server.New(eng, cfg)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		return "", nil, err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	return "http://" + ln.Addr().String(), func() {
		hs.Close()
		srv.Close()
	}, nil
}

// disaggResult is one request through a prefill and a decode instance.
type disaggResult struct {
	ttft, prefill    time.Duration
	blocks, streamed int
}

// disaggTTFT sends prompt to the prefill instance at prefill for transfer id, then to the
// decode instance at decode naming it, streamed, and returns the time from the prefill
// call to the first token and what the prefill instance reported.
func disaggTTFT(decode, prefill, id string, prompt []int32, outLen int) (disaggResult, error) {
	var info struct{ Address string }
	if err := getJSON(decode+"/v1/kv_transfer", &info); err != nil {
		return disaggResult{}, err
	}
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": outLen, "temperature": 0, "stream": true})
	start := time.Now()
	var pr struct {
		NumBlocks      int     `json:"num_blocks"`
		LayersStreamed int     `json:"layers_streamed"`
		PrefillMS      float64 `json:"prefill_ms"`
	}
	hdr := map[string]string{server.TransferHeader: id, server.TransferTargetHeader: info.Address}
	r, err := postBody(prefill+"/v1/kv_prefill/completions", body, hdr)
	if err != nil {
		return disaggResult{}, err
	}
	err = json.NewDecoder(r.Body).Decode(&pr)
	r.Body.Close()
	if err != nil || r.StatusCode != http.StatusOK {
		return disaggResult{}, fmt.Errorf("prefill: status %d: %v", r.StatusCode, err)
	}
	r, err = postBody(decode+"/v1/completions", body, map[string]string{server.TransferHeader: id})
	if err != nil {
		return disaggResult{}, err
	}
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(r.Body)
		return disaggResult{}, fmt.Errorf("decode: status %d: %s", r.StatusCode, raw)
	}
	res := disaggResult{prefill: time.Duration(pr.PrefillMS * float64(time.Millisecond)), blocks: pr.NumBlocks, streamed: pr.LayersStreamed}
	sc := bufio.NewScanner(r.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: ") && res.ttft == 0 {
			res.ttft = time.Since(start)
		}
	}
	if err := sc.Err(); err != nil {
		return disaggResult{}, err
	}
	if res.ttft == 0 {
		return disaggResult{}, errors.New("decode: no token streamed")
	}
	return res, nil
}

// postBody posts a JSON body with extra headers.
func postBody(url string, body []byte, hdr map[string]string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return http.DefaultClient.Do(req)
}

// getJSON decodes the JSON answer of a GET.
func getJSON(url string, v any) error {
	r, err := http.Get(url)
	if err != nil {
		return err
	}
	defer r.Body.Close()
	return json.NewDecoder(r.Body).Decode(v)
}

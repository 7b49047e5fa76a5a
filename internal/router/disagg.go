package router

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Prefill/decode disaggregation (Config.Prefill): the backends are decode instances
// (kvasir serve --role decode), and before a request goes to the decode instance chosen for
// it, a prefill instance (--role prefill) computes its prompt and streams the KV blocks to
// that decode instance. The handshake, all over the instances' HTTP APIs but the blocks:
//
//  1. The router learns each decode instance's transfer address from its GET
//     /v1/kv_transfer (polled until known).
//  2. For a request, it picks the decode instance as usual (cache overlap, load, session),
//     then the least loaded healthy prefill instance, and POSTs the client's body unchanged
//     to its /v1/kv_prefill/completions (or .../chat/completions) with a fresh transfer id
//     (X-Kvasir-KV-Transfer) and the decode instance's transfer address
//     (X-Kvasir-KV-Target). The prefill instance tokenizes the body as the real endpoint
//     would, computes the prompt, streams the blocks to the decode instance over TCP and
//     answers once the decode instance acknowledged them (200) or the transfer failed.
//  3. The router sends the client's body to the decode instance with the transfer id; the
//     decode instance admits the request with the blocks it holds under that id, or, when
//     it holds none (the prefill failed, stalled, or was skipped), computes the prompt.
//
// The prefill is skipped when the decode instance already caches every full block of the
// prompt (from its events) or the prompt has no full block. The router never tokenizes:
// the instances do, each with the model's own tokenizer and template.

// Headers of the handshake (the server's TransferHeader and TransferTargetHeader).
const (
	transferHeader       = "X-Kvasir-KV-Transfer"
	transferTargetHeader = "X-Kvasir-KV-Target"
)

// DefaultPrefillTimeout bounds a prefill and its transfer, seen from the router.
const DefaultPrefillTimeout = 2 * time.Minute

// Prefill outcomes (kvasir:router_prefills_total's outcome label).
const (
	prefillOK      = "ok"
	prefillFailed  = "failed"
	prefillSkipped = "skipped"
)

// prefill has a prefill instance compute the prompt of body (for the generation endpoint
// path) and transfer its KV to decode instance d; it returns the transfer id to send d,
// or "" when d is to compute the prompt itself.
func (r *Router) prefill(ctx context.Context, d *backend, path string, body []byte, h http.Header, hashes []string) string {
	if len(r.prefills) == 0 {
		return ""
	}
	addr := d.transferAddr()
	if addr == "" || len(hashes) == 0 || d.heldPrefix(hashes) == len(hashes) {
		r.metrics.prefills.WithLabelValues("", prefillSkipped).Inc()
		return ""
	}
	p := r.pickPrefill()
	if p == nil {
		r.log.Warn("no healthy prefill instance: the decode instance computes the prompt", "decode", d.name)
		r.metrics.prefills.WithLabelValues("", prefillFailed).Inc()
		return ""
	}
	id := newTransferID()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.PrefillTimeout)
	defer cancel()
	p.inflight.Add(1)
	defer p.inflight.Add(-1)
	hdr := h.Clone()
	hdr.Set(transferHeader, id)
	hdr.Set(transferTargetHeader, addr)
	res, err := r.postHeaders(ctx, p, "/v1/kv_prefill"+strings.TrimPrefix(path, "/v1"), body, hdr, transferHeader, transferTargetHeader)
	if err != nil {
		if ctx.Err() == nil || ctx.Err() == context.DeadlineExceeded {
			p.markDown()
		}
		r.log.Warn("prefill failed: the decode instance computes the prompt", "prefill", p.name, "decode", d.name, "err", err)
		r.metrics.prefills.WithLabelValues(p.name, prefillFailed).Inc()
		return ""
	}
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 1<<16))
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		r.log.Warn("prefill failed: the decode instance computes the prompt", "prefill", p.name, "decode", d.name, "status", res.StatusCode, "body", string(msg))
		r.metrics.prefills.WithLabelValues(p.name, prefillFailed).Inc()
		return ""
	}
	r.metrics.prefills.WithLabelValues(p.name, prefillOK).Inc()
	return id
}

// pickPrefill returns the least loaded healthy prefill instance, ties taken in turn.
func (r *Router) pickPrefill() *backend {
	r.mu.Lock()
	start := r.rr
	r.rr++
	r.mu.Unlock()
	var best *backend
	var bestLoad float64
	for i := range r.prefills {
		p := r.prefills[(start+i)%len(r.prefills)]
		if !p.healthy.Load() {
			continue
		}
		if l := p.load(); best == nil || l < bestLoad {
			best, bestLoad = p, l
		}
	}
	return best
}

// newTransferID returns a random transfer id.
func newTransferID() string {
	var b [16]byte
	rand.Read(b[:])
	return "kvx-" + hex.EncodeToString(b[:])
}

// transferAddr is the decode instance's KV transfer address ("" until known).
func (b *backend) transferAddr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.kvAddr
}

// heldPrefix counts the leading hashes the instance's events say it holds (predictions
// left out: the router predicts a prompt's blocks as soon as it routes it).
func (b *backend) heldPrefix(hashes []string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, h := range hashes {
		if _, ok := b.cache.held[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// readTransferInfo learns a decode instance's transfer address from GET /v1/kv_transfer.
func (r *Router) readTransferInfo(ctx context.Context, b *backend) error {
	return r.get(ctx, b, "/v1/kv_transfer", func(body io.Reader) error {
		var info struct {
			Role    string `json:"role"`
			Address string `json:"address"`
		}
		if err := json.NewDecoder(io.LimitReader(body, 1<<16)).Decode(&info); err != nil {
			return fmt.Errorf("kv transfer info: %w", err)
		}
		if info.Role != "decode" || info.Address == "" {
			return fmt.Errorf("kv transfer info: role %q, address %q: want a decode instance (kvasir serve --role decode)", info.Role, info.Address)
		}
		b.mu.Lock()
		b.kvAddr = info.Address
		b.mu.Unlock()
		return nil
	})
}

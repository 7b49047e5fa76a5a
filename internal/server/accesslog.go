package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/kvasir-llm/kvasir"
)

// This file holds what the server logs while it runs: a line per request (the access log)
// and, every Config.StatsInterval, a line of the engine's figures, as vLLM prints them.

// accessLog logs one line per request once it is answered: method, path, status, bytes
// written, duration and client address (as uvicorn's access log under vLLM).
func (s *Server) accessLog(next http.Handler) http.Handler {
	if !s.cfg.AccessLog {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &statusWriter{ResponseWriter: w}
		defer func() {
			status := rw.status
			if status == 0 {
				status = http.StatusOK
			}
			s.log.Info("access", "method", r.Method, "path", r.URL.Path, "status", status, "bytes", rw.bytes,
				"duration", time.Since(start).Round(time.Microsecond), "remote", r.RemoteAddr)
		}()
		next.ServeHTTP(rw, r)
	})
}

// statusWriter records the status and the bytes of a response. Unwrap lets
// http.ResponseController reach the connection's flush, deadlines and hijack.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap returns the wrapped ResponseWriter.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// DefaultStatsInterval is how often kvasir serve logs its stats line (vLLM's 10 s).
const DefaultStatsInterval = 10 * time.Second

// statsLine writes the stats line of the interval from prev to cur (dt long): prompt and
// generation throughput over it, running and waiting sequences, KV cache usage and the
// prefix cache hit rate (over the interval; since start when it looked nothing up), and
// with speculation its acceptance rate. idle reports an interval with no tokens at all.
func statsLine(prev, cur kvasir.Stats, dt time.Duration, speculating bool) (line string, idle bool) {
	sec := dt.Seconds()
	prompt := float64(cur.PromptTokens-prev.PromptTokens) / sec
	gen := float64(cur.GenerationTokens-prev.GenerationTokens) / sec
	queries, hits := cur.PrefixQueries-prev.PrefixQueries, cur.PrefixHits-prev.PrefixHits
	if queries == 0 {
		queries, hits = cur.PrefixQueries, cur.PrefixHits
	}
	hitRate := 0.0
	if queries > 0 {
		hitRate = 100 * float64(hits) / float64(queries)
	}
	line = fmt.Sprintf("Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, Running: %d reqs, Waiting: %d reqs, KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%",
		prompt, gen, cur.Running, cur.Waiting, 100*cur.KVUsage, hitRate)
	if drafted := cur.DraftTokens - prev.DraftTokens; speculating && drafted > 0 {
		accepted, drafts := cur.AcceptedDrafts-prev.AcceptedDrafts, cur.SpecDrafts-prev.SpecDrafts
		line += fmt.Sprintf(", Speculative decoding: acceptance rate %.1f%%, mean acceptance length %.2f",
			100*float64(accepted)/float64(drafted), 1+float64(accepted)/float64(max(drafts, 1)))
	}
	return line, prompt == 0 && gen == 0 && cur.Running == 0 && cur.Waiting == 0
}

// logStats logs the stats line every interval until ctx ends; of consecutive idle
// intervals only the first is logged, so that an idle server stays quiet.
func (s *Server) logStats(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	prev, at := s.eng.Stats(), time.Now()
	wasIdle := true
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			cur := s.eng.Stats()
			line, idle := statsLine(prev, cur, now.Sub(at), s.eng.Speculative() != nil)
			if !idle || !wasIdle {
				s.log.Info(line)
			}
			prev, at, wasIdle = cur, now, idle
		}
	}
}

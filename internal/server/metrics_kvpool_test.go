package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
)

// TestKVPoolMetrics: a server whose engine has a host offload tier exposes the pool's
// metrics with their types; one without registers none.
func TestKVPoolMetrics(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{KVOffloadMemory: 1 << 20}, Config{})
	if err := env.srv.Metrics().AddKVPool(env.eng); err != nil {
		t.Fatal(err)
	}
	status, body := env.do(t, http.MethodGet, "/metrics", nil)
	text := string(body)
	for _, want := range []string{
		`kvasir:kv_pool_up{engine="0",model_name="tiny"} 0`,
		`kvasir:kv_offload_blocks{engine="0",model_name="tiny"} 0`,
		"# TYPE kvasir:kv_pool_errors_total counter",
		"# TYPE kvasir:kv_pool_hits_total counter",
		"# TYPE kvasir:kv_pool_misses_total counter",
		"# TYPE kvasir:kv_pool_read_bytes_total counter",
		"# TYPE kvasir:kv_pool_written_bytes_total counter",
		"# TYPE kvasir:kv_pool_corrupt_total counter",
		"# TYPE kvasir:kv_pool_dropped_writes_total counter",
		"# TYPE kvasir:kv_offload_hits_total counter",
		"# TYPE kvasir:kv_offload_misses_total counter",
		"# TYPE kvasir:kv_offload_bytes gauge",
	} {
		if status != http.StatusOK || !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	other := newTestEnv(t, kvasir.Options{}, Config{})
	if err := other.srv.Metrics().AddKVPool(other.eng); err != nil {
		t.Fatal(err)
	}
	if _, body := other.do(t, http.MethodGet, "/metrics", nil); strings.Contains(string(body), "kv_pool") {
		t.Error("an engine without a pool reports pool metrics")
	}
}

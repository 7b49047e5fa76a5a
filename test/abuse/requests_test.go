//go:build linux

package abuse

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// requestCases are the table's hostile requests (issue 14 items 1, 3, 5 and 6's unknown
// role), each with the refusal it must get. The sizes are the table's: each body stays
// under the default --max-request-bytes (10 MiB), so that it is the per-request budgets,
// not the body limit, that must refuse it.
func requestCases(srv *server) []hostile {
	chatWith := func(content string) func() string {
		return func() string {
			return fmt.Sprintf(`{"messages":[{"role":"user","content":%q}],"max_tokens":4}`, content)
		}
	}
	return []hostile{
		{name: "stop_strings_1.1M_n16", path: "/v1/completions", body: func() string {
			return `{"prompt":"Once upon a time","n":16,"max_tokens":16,"stop":` + stopStrings(1_100_000) + `}`
		}, status: http.StatusBadRequest, mentions: regexp.MustCompile(`(?i)stop`)},
		{name: "prompts_256_x_n128_x_logprobs20", path: "/v1/completions", body: func() string {
			return `{"prompt":` + manyPrompts(256) + `,"n":128,"logprobs":20,"max_tokens":16}`
		}, status: http.StatusBadRequest, mentions: regexp.MustCompile(`(?i)logprobs|\bn\b|prompts?\b|choices|response`)},
		{name: "prompt_9.5MiB", path: "/v1/completions", body: func() string {
			return `{"prompt":"` + strings.Repeat("Once upon a time ", 9_500_000/17) + `","max_tokens":1}`
		}, status: http.StatusBadRequest, mentions: regexp.MustCompile(`(?i)prompt`)},
		{name: "chat_300k_messages", path: "/v1/chat/completions", body: func() string {
			return `{"messages":` + manyMessages(300_000) + `,"max_tokens":1}`
		}, status: http.StatusBadRequest, mentions: regexp.MustCompile(`(?i)messages`)},
		{name: "chat_unknown_role", path: "/v1/chat/completions", body: func() string {
			return `{"messages":[{"role":"wizard","content":"hi"}],"max_tokens":1}`
		}, status: http.StatusBadRequest, mentions: regexp.MustCompile(`messages\[0\]\.role`)},
		{name: "template_unbounded_recursion", path: "/v1/chat/completions", body: chatWith(triggerRecursion),
			status: http.StatusBadRequest, mentions: regexp.MustCompile(`(?i)recursion|depth|stack`)},
		{name: "template_string_times_1e9", path: "/v1/chat/completions", body: chatWith(triggerRepeat),
			status: http.StatusBadRequest, mentions: regexp.MustCompile(`(?i)output|size|memory|bytes`)},
		{name: "template_range_1e8", path: "/v1/chat/completions", body: chatWith(triggerRange),
			status: http.StatusBadRequest, mentions: regexp.MustCompile(`(?i)deadline|time|iteration|loop|memory`)},
		{name: "foreign_host_post", path: "/v1/completions", body: func() string { return ordinaryBody },
			host: "attacker.example", mentions: regexp.MustCompile(`(?i)host`)},
		{name: "foreign_host_dns_rebinding_read", method: http.MethodGet, path: "/v1/models",
			host: "rebind.attacker.example:" + port(srv), mentions: regexp.MustCompile(`(?i)host`)},
		{name: "foreign_origin", path: "/v1/completions", body: func() string { return ordinaryBody },
			origin: "http://attacker.example", mentions: regexp.MustCompile(`(?i)origin`)},
		{name: "text_plain_post", path: "/v1/completions", body: func() string { return ordinaryBody },
			contentType: "text/plain;charset=UTF-8", mentions: regexp.MustCompile(`(?i)content.type`)},
		// The body limit still holds first (it passes on an unfixed tree: a check of the
		// suite itself).
		{name: "body_over_max_request_bytes", path: "/v1/completions", body: func() string {
			return `{"prompt":"` + strings.Repeat("a", 11<<20) + `"}`
		}, status: http.StatusRequestEntityTooLarge, mentions: regexp.MustCompile(`(?i)bytes|request_too_large`)},
		// Not a hostile case: the checks above must not refuse an ordinary local client.
		{name: "local_json_client_still_served", path: "/v1/chat/completions", body: chatWith("hello"),
			host: "localhost:" + port(srv), contentType: "application/json; charset=utf-8"},
	}
}

// port is the port s listens on.
func port(s *server) string { return s.addr[strings.LastIndexByte(s.addr, ':')+1:] }

// TestRequests replays the table's hostile requests against one server (the fast model, its
// chat template a trap that misbehaves on three trigger messages) while ordinary users keep
// asking; a case that fails gets a fresh server for the next.
func TestRequests(t *testing.T) {
	srv := mustStart(t, "-m", trapModel(t))
	if err := warm(srv); err != nil {
		t.Fatal(err)
	}
	for _, h := range requestCases(srv) {
		if !runCase(t, h.name, func(c *check) { replay(c, srv, h) }) {
			if err := srv.restart(); err != nil {
				t.Fatal(err)
			}
			if err := warm(srv); err != nil {
				t.Fatal(err)
			}
		}
	}
}

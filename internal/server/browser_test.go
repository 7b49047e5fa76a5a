package server

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
)

// browserRequest sends a request with the given Host, Origin and Content-Type headers
// (empty: not sent; Host empty: the server's address) and returns the response with its body.
func (e *testEnv) browserRequest(t *testing.T, method, path, host, origin, ct, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	res, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

const tinyCompletion = `{"prompt":"hi","max_tokens":1}`

// TestHostCheck: on a loopback connection, a Host naming another machine (DNS rebinding)
// is refused; loopback names and the listen address are answered, and so are the names of
// AllowedHosts; "*" turns the check off.
func TestHostCheck(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	widened := newTestEnv(t, kvasir.Options{}, Config{AllowedHosts: []string{"kvasir.lan", "box.example:8443"}})
	open := newTestEnv(t, kvasir.Options{}, Config{AllowedHosts: []string{"*"}})
	for _, tc := range []struct {
		env    *testEnv
		host   string
		status int
	}{
		{env, "", 200}, // 127.0.0.1:port, the listen address
		{env, "localhost:8000", 200},
		{env, "LOCALHOST", 200},
		{env, "127.0.0.1", 200},
		{env, "127.8.9.10:1234", 200},
		{env, "[::1]:8000", 200},
		{env, "app.localhost:5173", 200},
		{env, "localhost.:8000", 200},
		{env, "attacker.example:8000", 403},
		{env, "attacker.example", 403},
		{env, "localhost.attacker.example", 403},
		{env, "192.168.1.20:8000", 403},
		{widened, "kvasir.lan:8000", 200},
		{widened, "KVASIR.lan", 200},
		{widened, "box.example:8443", 200},
		{widened, "box.example:8000", 403},
		{widened, "localhost:8000", 200},
		{widened, "attacker.example", 403},
		{open, "attacker.example", 200},
	} {
		for _, path := range []string{"/v1/completions", "/v1/models"} {
			method, body := http.MethodPost, tinyCompletion
			if path == "/v1/models" {
				method, body = http.MethodGet, ""
			}
			res, got := tc.env.browserRequest(t, method, path, tc.host, "", "application/json", body)
			if res.StatusCode != tc.status {
				t.Errorf("%s Host %q (allowed %v): status %d, want %d: %s", path, tc.host, tc.env.srv.cfg.AllowedHosts, res.StatusCode, tc.status, got)
			} else if tc.status == 403 && apiErrorOf(t, []byte(got))["code"] != "host_not_allowed" {
				t.Errorf("Host %q: %s", tc.host, got)
			}
		}
	}
}

// TestOriginCheck: a request with an Origin is refused unless the origin is allowed; an
// allowed one gets CORS headers, its preflight is answered (before the API key is asked
// for), and its errors carry the headers too, so the page can read them.
func TestOriginCheck(t *testing.T) {
	none := newTestEnv(t, kvasir.Options{}, Config{})
	some := newTestEnv(t, kvasir.Options{}, Config{AllowedOrigins: []string{"http://localhost:3000", "https://app.example.com/"}, APIKey: "sekret"})
	all := newTestEnv(t, kvasir.Options{}, Config{AllowedOrigins: []string{"*"}})
	auth := func(e *testEnv) string {
		if e.apiKey != "" {
			return "Bearer " + e.apiKey
		}
		return ""
	}
	for _, tc := range []struct {
		env            *testEnv
		method, origin string
		status         int
	}{
		{none, "POST", "https://attacker.example", 403},
		{none, "POST", "http://localhost:3000", 403},
		{none, "POST", "null", 403},
		{none, "GET", "https://attacker.example", 403},
		{none, "OPTIONS", "https://attacker.example", 403},
		{none, "POST", "", 200},
		{some, "POST", "http://localhost:3000", 200},
		{some, "POST", "HTTPS://APP.example.com", 200},
		{some, "POST", "https://app.example.com:443", 200},
		{some, "POST", "http://app.example.com", 403},
		{some, "POST", "http://localhost:3001", 403},
		{some, "OPTIONS", "http://localhost:3000", 204},
		{some, "OPTIONS", "http://localhost:3001", 403},
		{all, "POST", "https://anywhere.example", 200},
		{all, "OPTIONS", "null", 204},
	} {
		req, err := http.NewRequest(tc.method, tc.env.ts.URL+"/v1/completions", strings.NewReader(tinyCompletion))
		if err != nil {
			t.Fatal(err)
		}
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		req.Header.Set("Content-Type", "application/json")
		if tc.method == http.MethodOptions {
			req.Header.Set("Access-Control-Request-Method", "POST")
			req.Header.Set("Access-Control-Request-Headers", "authorization, content-type, x-stainless-os")
		} else if a := auth(tc.env); a != "" {
			req.Header.Set("Authorization", a)
		}
		res, err := tc.env.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		name := tc.method + " Origin " + tc.origin
		if res.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d: %s", name, res.StatusCode, tc.status, body)
			continue
		}
		acao := res.Header.Get("Access-Control-Allow-Origin")
		switch {
		case tc.status == 403:
			if acao != "" || apiErrorOf(t, body)["code"] != "origin_not_allowed" {
				t.Errorf("%s: refused with Access-Control-Allow-Origin %q: %s", name, acao, body)
			}
		case tc.origin == "":
			if acao != "" {
				t.Errorf("%s: CORS headers without an Origin", name)
			}
		default:
			if acao != tc.origin || !strings.Contains(res.Header.Get("Vary"), "Origin") {
				t.Errorf("%s: Access-Control-Allow-Origin %q, Vary %q", name, acao, res.Header.Get("Vary"))
			}
		}
		if tc.status == 204 {
			if m := res.Header.Get("Access-Control-Allow-Methods"); !strings.Contains(m, "POST") {
				t.Errorf("%s: Access-Control-Allow-Methods %q", name, m)
			}
			if h := res.Header.Get("Access-Control-Allow-Headers"); h != "authorization, content-type, x-stainless-os" {
				t.Errorf("%s: Access-Control-Allow-Headers %q", name, h)
			}
		}
	}
	// Without the key, an allowed page still gets its 401 with the CORS headers to read it.
	res, body := some.browserRequest(t, http.MethodPost, "/v1/completions", "", "http://localhost:3000", "application/json", tinyCompletion)
	if res.StatusCode != 401 || res.Header.Get("Access-Control-Allow-Origin") != "http://localhost:3000" {
		t.Errorf("401 without the key: status %d, Access-Control-Allow-Origin %q: %s", res.StatusCode, res.Header.Get("Access-Control-Allow-Origin"), body)
	}
}

// TestContentType: the JSON endpoints refuse the content types a web page can POST
// without a preflight (text/plain, forms) with 415, and accept application/json with any
// charset, or no Content-Type at all.
func TestContentType(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	for _, tc := range []struct {
		ct     string
		status int
	}{
		{"application/json", 200},
		{"application/json; charset=utf-8", 200},
		{"Application/JSON;charset=UTF-8", 200},
		{"application/json; charset=latin1", 200},
		{"application/json;", 200},
		{"", 200},
		{"text/plain", 415},
		{"text/plain;charset=UTF-8", 415},
		{"application/x-www-form-urlencoded", 415},
		{"multipart/form-data; boundary=x", 415},
		{"application/jsonp", 415},
		{"json", 415},
	} {
		for _, path := range []string{"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"} {
			body := map[string]string{"/v1/completions": tinyCompletion, "/v1/chat/completions": `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`,
				"/tokenize": `{"prompt":"hi"}`, "/detokenize": `{"tokens":[1,2]}`}[path]
			res, got := env.browserRequest(t, http.MethodPost, path, "", "", tc.ct, body)
			if res.StatusCode != tc.status {
				t.Errorf("%s Content-Type %q: status %d, want %d: %s", path, tc.ct, res.StatusCode, tc.status, got)
			} else if tc.status == 415 {
				if e := apiErrorOf(t, []byte(got)); e["code"] != "unsupported_media_type" || !strings.Contains(e["message"].(string), "application/json") {
					t.Errorf("%s Content-Type %q: %s", path, tc.ct, got)
				}
			}
		}
	}
}

func TestPolicyErrors(t *testing.T) {
	for _, h := range []string{"http://kvasir.lan", "a b", "x/y"} {
		if _, err := newHostPolicy([]string{h}); err == nil {
			t.Errorf("allowed host %q accepted", h)
		}
	}
	for _, o := range []string{"localhost:3000", "http://x.example/path", "http://x.example?q", "http://u@x.example", "http://", "app.example.com"} {
		if _, err := newOriginPolicy([]string{o}); err == nil {
			t.Errorf("allowed origin %q accepted", o)
		}
	}
	env := newTinyEngine(t, kvasir.Options{})
	if _, err := New(env, Config{AllowedOrigins: []string{"localhost:3000"}}); err == nil || !strings.Contains(err.Error(), "localhost:3000") {
		t.Errorf("New with a bad origin: %v", err)
	}
}

func TestNormalizeOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"http://localhost:3000":       "http://localhost:3000",
		"HTTP://LocalHost:3000/":      "http://localhost:3000",
		"https://app.example.com:443": "https://app.example.com",
		"http://app.example.com:80":   "http://app.example.com",
		"https://app.example.com:80":  "https://app.example.com:80",
		"http://[::1]:8080":           "http://[::1]:8080",
		"null":                        "null",
		"http://x.example/a":          "",
		"file:///etc":                 "",
		"":                            "",
	} {
		got, ok := normalizeOrigin(in)
		if got != want || ok != (want != "") {
			t.Errorf("normalizeOrigin(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

// FuzzBrowserHeaders feeds arbitrary Host, Origin and Content-Type values to their
// parsers: they never panic, a normalized origin normalizes to itself, a host the policy
// lists is allowed however it is cased, and only application/json (or nothing) is JSON.
func FuzzBrowserHeaders(f *testing.F) {
	for _, s := range [][3]string{
		{"localhost:8000", "http://localhost:3000", "application/json"},
		{"[::1]:80", "null", "application/json; charset=utf-8"},
		{"attacker.example", "https://a.example:443/", "text/plain"},
		{"[::1", "http://[::1", "multipart/form-data; boundary="},
		{"127.0.0.1:", "http://%zz", "application/json;;"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, host, origin, ct string) {
		if h, _ := splitHost(host); h != strings.ToLower(h) {
			t.Errorf("splitHost(%q) host %q not lower case", host, h)
		}
		if p, err := newHostPolicy([]string{host}); err == nil && len(p.set) > 0 && strings.TrimSpace(host) == host {
			if !p.allowsRequest(&http.Request{Host: host}) {
				t.Errorf("Host %q not allowed by its own policy %v", host, p.set)
			}
		}
		if n, ok := normalizeOrigin(origin); ok {
			if again, ok := normalizeOrigin(n); !ok || again != n {
				t.Errorf("normalizeOrigin(%q) = %q, then %q, %v", origin, n, again, ok)
			}
			if p, err := newOriginPolicy([]string{origin}); err != nil || !p.allows(origin) {
				t.Errorf("origin %q not allowed by its own policy (%v)", origin, err)
			}
		}
		if isJSONContentType(ct) && strings.TrimSpace(ct) != "" && !strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "application/json") {
			t.Errorf("%q taken for JSON", ct)
		}
	})
}

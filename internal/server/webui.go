package server

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
	"net/netip"
	"strconv"
)

// The chat page served at / : one static HTML file (its CSS and script inline) built into
// the binary, that talks to the server's own /v1/models and /v1/chat/completions. The page
// itself needs no API key (it holds no data); its API calls send the key the user types.

//go:embed webui/index.html
var webUIPage []byte

// webUIPolicy is the page's Content-Security-Policy: nothing but the page itself and its
// own origin's API, its one inline script admitted by hash.
var webUIPolicy = "default-src 'none'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'; script-src " + scriptHash(webUIPage)

// scriptHash is the CSP source of the first inline script of an HTML page.
func scriptHash(page []byte) string {
	_, rest, ok := bytes.Cut(page, []byte("<script>"))
	body, _, ok2 := bytes.Cut(rest, []byte("</script>"))
	if !ok || !ok2 {
		panic("webui: the page has no inline script")
	}
	sum := sha256.Sum256(body)
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

// handleWebUI answers GET / with the chat page.
func (s *Server) handleWebUI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(webUIPage)))
	h.Set("Content-Security-Policy", webUIPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(webUIPage)
	}
}

// sameOrigin reports whether a request's Origin is the server's own, as the chat page's
// calls are: the scheme and Host the request came to, where that Host names this server
// for certain (a loopback name, the address the connection arrived on, or one of
// Config.AllowedHosts), so that a DNS-rebinding page, same-origin with itself under its own
// name, is not taken for the server's page.
func (s *Server) sameOrigin(r *http.Request, origin string) bool {
	scheme := "http://"
	if r.TLS != nil {
		scheme = "https://"
	}
	want, ok := normalizeOrigin(scheme + r.Host)
	got, ok2 := normalizeOrigin(origin)
	if !ok || !ok2 || got != want {
		return false
	}
	host, port := splitHost(r.Host)
	if isLoopbackName(host) {
		return true
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Unmap() == localIP(r) {
		return true
	}
	return s.hosts.set[host] || (port != "" && s.hosts.set[hostKey(host, port)])
}

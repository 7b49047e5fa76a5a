package server

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// browserChecks refuses what a web page could make a browser send to a local server on
// its user's behalf. A connection that arrives on a loopback address (all of them when the
// server listens on 127.0.0.1, the default) must name a loopback host or the listen
// address in its Host header, or one of Config.AllowedHosts: a DNS-rebinding page, whose
// requests name its own domain, gets 403. A request with an Origin header (a browser's,
// cross-site) must come from the server's own origin (the chat page at /) or one of
// Config.AllowedOrigins, or it gets 403; an allowed origin gets the CORS headers it
// needs, and its preflight (OPTIONS with Access-Control-Request-Method) is answered here,
// before the API key is asked for, since browsers send none with it.
func (s *Server) browserChecks(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hosts.allowsRequest(r) {
			refuseEarly(w, r, forbidden("host_not_allowed",
				"the Host %.100q is not allowed: this server answers its listen address and loopback names (add names with --allowed-hosts)", r.Host))
			return
		}
		origin := r.Header.Get("Origin")
		if origin == "" || s.sameOrigin(r, origin) {
			next.ServeHTTP(w, r)
			return
		}
		if !s.origins.allows(origin) {
			refuseEarly(w, r, forbidden("origin_not_allowed",
				"the Origin %.100q is not allowed: web pages may call this server only from the origins of --allowed-origins", origin))
			return
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			s.preflight(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// preflight answers a CORS preflight of an allowed origin: 204 with the methods and headers
// allowed (Config.AllowedMethods, Config.AllowedHeaders; with "*" the ones asked for), or
// 403 naming the method or header that is not.
func (s *Server) preflight(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	m := strings.ToUpper(strings.TrimSpace(r.Header.Get("Access-Control-Request-Method")))
	if !s.corsMethods.any && !s.corsMethods.set[m] {
		h.Del("Access-Control-Allow-Origin")
		writeError(w, forbidden("cors_method_not_allowed", "the method %.20q is not allowed by CORS: allow it with --allowed-methods", m))
		return
	}
	var asked []string
	for _, hd := range strings.Split(r.Header.Get("Access-Control-Request-Headers"), ",") {
		if hd = strings.ToLower(strings.TrimSpace(hd)); hd != "" {
			if !s.corsHeaders.any && !s.corsHeaders.set[hd] {
				h.Del("Access-Control-Allow-Origin")
				writeError(w, forbidden("cors_header_not_allowed", "the header %.100q is not allowed by CORS: allow it with --allowed-headers", hd))
				return
			}
			asked = append(asked, hd)
		}
	}
	methods := "GET, POST, OPTIONS"
	if !s.corsMethods.any {
		methods = strings.Join(s.cfg.AllowedMethods, ", ")
	}
	if !strings.Contains(methods, m) {
		methods += ", " + m
	}
	h.Set("Access-Control-Allow-Methods", methods)
	if len(asked) > 0 {
		h.Set("Access-Control-Allow-Headers", strings.Join(asked, ", "))
	}
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
}

// newCORSList reads Config.AllowedMethods or AllowedHeaders: empty or "*" allows all;
// names compare upper-cased (methods) or lower-cased (headers).
func newCORSList(list []string, upper bool) allowList {
	l := allowList{set: map[string]bool{}}
	for _, v := range list {
		v = strings.TrimSpace(v)
		if v == "*" {
			l.any = true
		}
		if upper {
			v = strings.ToUpper(v)
		} else {
			v = strings.ToLower(v)
		}
		l.set[v] = true
	}
	l.any = l.any || len(list) == 0
	return l
}

// forbidden is a 403 with the given code.
func forbidden(code, format string, args ...any) *APIError {
	return &APIError{Status: http.StatusForbidden, Type: "invalid_request_error", Code: code, Message: fmt.Sprintf(format, args...)}
}

// allowList is a set of allowed values, or all of them.
type allowList struct {
	any bool            // "*": every value
	set map[string]bool // the allowed values' keys
}

// newAllowList reads a list whose entries key turns into their keys; empty entries are
// skipped and "*" allows every value.
func newAllowList(list []string, key func(string) (string, error)) (allowList, error) {
	l := allowList{set: map[string]bool{}}
	for _, e := range list {
		e = strings.TrimSpace(e)
		switch {
		case e == "":
		case e == "*":
			l.any = true
		default:
			k, err := key(e)
			if err != nil {
				return l, err
			}
			l.set[k] = true
		}
	}
	return l, nil
}

// hostPolicy is the set of Host header values a server answers besides loopback names and
// its listen address: "name" (any port) or "name:port", lower case.
type hostPolicy struct{ allowList }

// newHostPolicy reads Config.AllowedHosts: host names or IP addresses, each alone (any
// port) or with a port, or "*".
func newHostPolicy(list []string) (hostPolicy, error) {
	l, err := newAllowList(list, func(h string) (string, error) {
		if strings.ContainsAny(h, "/ \t") {
			return "", fmt.Errorf("allowed host %q: give a host name or address, optionally with :port (not a URL)", h)
		}
		return hostKey(splitHost(h)), nil
	})
	return hostPolicy{l}, err
}

// allowsRequest reports whether the server answers r's Host. The check applies to a
// connection arriving on a loopback address, and to every connection once allowed hosts are
// configured; a request without a Host (HTTP/1.0: no browser) passes.
func (p hostPolicy) allowsRequest(r *http.Request) bool {
	if p.any || r.Host == "" {
		return true
	}
	local := localIP(r)
	if !local.IsLoopback() && len(p.set) == 0 {
		return true
	}
	host, port := splitHost(r.Host)
	if isLoopbackName(host) {
		return true
	}
	if ip, err := netip.ParseAddr(host); err == nil && local.IsValid() && ip.Unmap() == local {
		return true
	}
	return p.set[host] || (port != "" && p.set[hostKey(host, port)])
}

// localIP is the address the request's connection arrived on (invalid when unknown).
func localIP(r *http.Request) netip.Addr {
	a, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if a == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// splitHost splits a Host header value into its lower-case host (an IPv6 address without
// brackets, no trailing dot) and its port ("" when none).
func splitHost(h string) (host, port string) {
	if hh, pp, err := net.SplitHostPort(h); err == nil {
		host, port = hh, pp
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	}
	return strings.TrimSuffix(strings.ToLower(host), "."), port
}

// hostKey is the policy key of a host with a port ("" for any port).
func hostKey(host, port string) string {
	if port == "" {
		return host
	}
	return net.JoinHostPort(host, port)
}

// isLoopbackName reports whether a host (as splitHost returns it) always means this
// machine: localhost, a name under .localhost (RFC 6761: browsers resolve them to
// loopback themselves), or a loopback address.
func isLoopbackName(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// originPolicy is the set of origins whose web pages may call the server, normalized as
// normalizeOrigin writes them.
type originPolicy struct{ allowList }

// newOriginPolicy reads Config.AllowedOrigins: origins such as "https://app.example.com"
// or "http://localhost:3000", "null" (the opaque origin of files and sandboxes), or "*".
func newOriginPolicy(list []string) (originPolicy, error) {
	l, err := newAllowList(list, func(o string) (string, error) {
		n, ok := normalizeOrigin(o)
		if !ok {
			return "", fmt.Errorf("allowed origin %q: give scheme://host[:port], such as http://localhost:3000", o)
		}
		return n, nil
	})
	return originPolicy{l}, err
}

// allows reports whether a request's Origin header is allowed.
func (p originPolicy) allows(origin string) bool {
	if p.any {
		return true
	}
	n, ok := normalizeOrigin(origin)
	return ok && p.set[n]
}

// normalizeOrigin writes an origin as scheme://host[:port] in lower case, without the
// scheme's default port or a trailing slash ("null" stays "null"); ok is false for
// anything else (a path, a query, user info, no host).
func normalizeOrigin(o string) (string, bool) {
	o = strings.ToLower(strings.TrimSpace(o))
	if o == "null" {
		return o, true
	}
	u, err := url.Parse(strings.TrimSuffix(o, "/"))
	if err != nil || u.Scheme == "" || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Opaque != "" {
		return "", false
	}
	host := u.Host
	if port := u.Port(); (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		host = strings.TrimSuffix(host, ":"+port)
	}
	return u.Scheme + "://" + host, true
}

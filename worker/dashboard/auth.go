package dashboard

import (
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// A dashboard with a token takes it three ways: as the password of basic
// authentication, which a browser asks for; as a Bearer header, for
// scripts; and in a login link, ?token=T on any page, which the command
// prints so that a person opens the dashboard with one click. The link
// trades the token for a session cookie and sends the browser on to the
// same page without it, so that the token leaves the address bar, the
// links a person copies and the live script's requests.
//
// The cookie holds a digest of the token, not the token: a cookie that
// leaks (a browser profile, a debugging proxy) opens this dashboard until
// its token changes, and does not give away a token that may be used
// elsewhere. It is HttpOnly (no script reads it), SameSite=Lax and, over
// TLS, Secure. Lax, not Strict: a login link clicked in a web mail or chat
// is a cross-site navigation, on which a Strict cookie set by the
// redirect is withheld, and the first page would ask for a password. Lax
// sends it on such top-level reads only, and a read changes nothing: every
// action is a POST, which another site's page never gets the cookie on,
// and which CrossOriginProtection refuses unless same-origin. A browser
// sends it to the dashboard's own host name alone, so a rebound name (DNS
// rebinding) has none. Cookies are not kept apart by port: a page on
// another port of the same host gets it too (CrossOriginProtection still
// refuses that page's POSTs); its name carries a digest of the token, so
// that two dashboards on one host do not overwrite each other's.

// sessionCookiePrefix begins the name of the cookie a login link sets.
const sessionCookiePrefix = "mscheduler_dashboard_"

// sessionDomain keeps the session's digest apart from any other digest of
// the token.
const sessionDomain = "mscheduler dashboard session\x00"

// credentials are what a request's credentials are compared with: digests,
// so that a comparison takes the same time whatever was sent.
type credentials struct {
	token   [sha256.Size]byte
	session string // the session cookie's value
	cookie  string // and its name
}

func newCredentials(token string) credentials {
	session := sha256.Sum256([]byte(sessionDomain + token))
	name := sha256.Sum256([]byte(cookieNameDomain + token))
	return credentials{token: sha256.Sum256([]byte(token)), session: hex.EncodeToString(session[:]),
		cookie: sessionCookiePrefix + hex.EncodeToString(name[:4])}
}

// cookieNameDomain keeps the digest in the cookie's name apart from the
// others.
const cookieNameDomain = "mscheduler dashboard cookie name\x00"

func (c credentials) tokenMatches(got string) bool {
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], c.token[:]) == 1
}

// accepts says a request carries the token (basic auth, Bearer) or a
// session cookie of it. Any one will do: a browser may still send the
// basic-auth password of an earlier token beside a fresh cookie. Every
// cookie of the name counts: two dashboards mounted under different paths
// of one host each set their own.
func (c credentials) accepts(r *http.Request) bool {
	if _, pass, ok := r.BasicAuth(); ok && c.tokenMatches(pass) {
		return true
	}
	if bearer, ok := bearerToken(r); ok && c.tokenMatches(bearer) {
		return true
	}
	for _, ck := range r.CookiesNamed(c.cookie) {
		if subtle.ConstantTimeCompare([]byte(ck.Value), []byte(c.session)) == 1 {
			return true
		}
	}
	return false
}

// authenticate requires the token when one is configured, and logs in a
// browser that opens a login link.
func (d *Dashboard) authenticate(next http.Handler) http.Handler {
	if d.cfg.Token == "" {
		return next
	}
	cred := newCredentials(d.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token, ok := linkToken(r); ok {
			if !cred.tokenMatches(token) {
				unauthorized(w, "the token in the link is not this dashboard's token")
				return
			}
			cred.login(w, r)
			return
		}
		if !cred.accepts(r) {
			unauthorized(w, "the dashboard needs its token: open a link with ?token=<token>, give it as the basic-auth password, or send Authorization: Bearer <token>")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// linkToken is the token of a login link. Only a read logs in: a form
// that sends the token in its URL gains nothing a form could not do with
// a header.
func linkToken(r *http.Request) (string, bool) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return "", false
	}
	q := r.URL.Query()
	return q.Get("token"), q.Has("token")
}

// login sets the session cookie and sends the browser to the page it
// asked for, without the token.
func (c credentials) login(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name:     c.cookie,
		Value:    c.session,
		Path:     cmp.Or(mountPrefix(r), "/"),
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteLaxMode,
	})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, withoutToken(r), http.StatusSeeOther)
}

func unauthorized(w http.ResponseWriter, message string) {
	w.Header().Set("WWW-Authenticate", `Basic realm="mscheduler", charset="UTF-8"`)
	http.Error(w, message, http.StatusUnauthorized)
}

// requestPath is the path the client asked for, before any
// http.StripPrefix: only RequestURI keeps it.
func requestPath(r *http.Request) string {
	if u, err := url.ParseRequestURI(r.RequestURI); err == nil && u.Path != "" {
		return u.EscapedPath()
	}
	return r.URL.EscapedPath()
}

// mountPrefix is the path the dashboard is mounted under ("/jobs" for
// http.StripPrefix("/jobs", d)), or "" at the root or when it cannot be
// told, so that the cookie goes to this dashboard's pages alone.
func mountPrefix(r *http.Request) string {
	prefix, ok := strings.CutSuffix(requestPath(r), r.URL.EscapedPath())
	if !ok || !strings.HasPrefix(prefix, "/") {
		return ""
	}
	return prefix
}

// withoutToken is the URL the client asked for without its token
// parameter, the others kept as they were sent. The path is made to
// start with a single slash: "//host" or "/\host" would leave the
// dashboard.
func withoutToken(r *http.Request) string {
	asked := requestPath(r)
	target := "/" + strings.TrimLeft(path.Clean("/"+asked), `/\`)
	if strings.HasSuffix(asked, "/") && !strings.HasSuffix(target, "/") {
		target += "/" // "/jobs/" is the mount's root; "/jobs" is not
	}
	var kept []string
	for _, part := range strings.Split(r.URL.RawQuery, "&") {
		name, _, _ := strings.Cut(part, "=")
		if n, err := url.QueryUnescape(name); part == "" || err == nil && n == "token" {
			continue
		}
		kept = append(kept, part)
	}
	if len(kept) > 0 {
		target += "?" + strings.Join(kept, "&")
	}
	return target
}

// bearerToken is the token of an "Authorization: Bearer <token>" header.
// The scheme's name is case-insensitive (RFC 9110): "bearer" is Bearer.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return strings.TrimSpace(token), ok && strings.EqualFold(scheme, "Bearer")
}

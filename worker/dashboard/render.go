package dashboard

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFS embed.FS

// staticFiles serves the embedded style sheet and script.
func staticFiles() http.Handler {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	return http.FileServer(http.FS(sub))
}

// pages are the parsed templates, one set per page: each page defines
// "title" and "content" for the layout.
type pages struct {
	byName map[string]*template.Template
}

var pageNames = []string{"overview", "tasks", "task", "workers", "schedules", "error"}

func parsePages() (*pages, error) {
	p := &pages{byName: map[string]*template.Template{}}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: parse %s: %w", name, err)
		}
		p.byName[name] = t
	}
	return p, nil
}

// view is what every page gets: its own data, and the frame's.
type view struct {
	Title       string
	Nav         string // the nav entry to mark current
	ReadOnly    bool
	ReadOnlyWhy string // shown where the actions would be
	Collections []string
	Collection  string
	Now         time.Time
	Message     string // a notice at the top: what an action did, or why not
	Bad         bool   // the notice is an error
	Data        any
}

// render writes a page, or a plain 500 if the template fails (which a
// test would have caught).
func (d *Dashboard) render(w http.ResponseWriter, status int, name string, v view) {
	v.ReadOnly, v.ReadOnlyWhy = d.ReadOnly(), d.readOnlyWhy()
	v.Now = time.Now().UTC()
	var buf bytes.Buffer
	if err := d.pages.byName[name].Execute(&buf, v); err != nil {
		d.cfg.Logger.Error("dashboard: render", "page", name, "error", err)
		http.Error(w, "the page could not be drawn", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail shows an error page with a message for a person.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, status int, message string) {
	d.render(w, status, "error", view{Title: http.StatusText(status), Message: message, Bad: true, Nav: "error"})
}

var funcs = template.FuncMap{
	"when":       when,
	"utc":        func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"inZone":     inZone,
	"json":       prettyJSON,
	"join":       strings.Join,
	"ms":         func(d time.Duration) string { return d.Round(time.Millisecond).String() },
	"took":       tookText,
	"stateOf":    stateOf,
	"versionOf":  versionOf,
	"shellQuote": shellQuote,
	"add":        func(a, b int) int { return a + b },
	"truncated":  truncated,
	"errorText":  splitError,
}

// errorLines is a run's error text split for the history table: its first
// line, and the rest (the stack of a recovered panic) shown on demand.
type errorLines struct{ Head, Rest string }

func splitError(s string) errorLines {
	head, rest, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return errorLines{Head: head, Rest: strings.TrimSpace(rest)}
}

// when renders a time for people: relative text, kept fresh by the page's
// script, with the absolute UTC time on hover.
func when(t time.Time) template.HTML {
	if t.IsZero() {
		return "-"
	}
	utc := t.UTC().Format(time.RFC3339)
	return template.HTML(fmt.Sprintf(`<time datetime="%s" title="%s">%s</time>`,
		template.HTMLEscapeString(utc), template.HTMLEscapeString(utc), template.HTMLEscapeString(relative(t, time.Now()))))
}

// relative says how far t is from now: "in 3 min", "12 s ago".
func relative(t, now time.Time) string {
	d := t.Sub(now)
	future := d > 0
	if !future {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		s = fmt.Sprintf("%d s", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%d h", int(d/time.Hour))
	default:
		s = fmt.Sprintf("%d days", int(d/(24*time.Hour)))
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// inZone formats t in the named zone (a plan's), or UTC if it is unknown.
func inZone(t time.Time, zone string) string {
	loc, err := time.LoadLocation(zone)
	if err != nil || zone == "" {
		loc = time.UTC
	}
	return t.In(loc).Format("2006-01-02 15:04:05 MST")
}

// prettyJSON shows a stored BSON value as indented extended JSON.
func prettyJSON(v bson.RawValue) string {
	if v.Type == 0 {
		return "none"
	}
	doc, err := bson.Marshal(bson.D{{Key: "v", Value: v}})
	if err != nil {
		return v.String()
	}
	ext, err := bson.MarshalExtJSON(bson.Raw(doc), false, false)
	if err != nil {
		return v.String()
	}
	var wrapped struct {
		V json.RawMessage `json:"v"`
	}
	if json.Unmarshal(ext, &wrapped) != nil {
		return string(ext)
	}
	var out bytes.Buffer
	if json.Indent(&out, wrapped.V, "", "  ") != nil {
		return string(wrapped.V)
	}
	return out.String()
}

// truncated cuts a long text for a table cell.
func truncated(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// tookText is how long a run took, or "-" when its record cannot say: a
// time missing, or a finish before the start (a record edited by hand),
// which would read as a negative duration of centuries.
func tookText(started, finished time.Time) string {
	if started.IsZero() || finished.IsZero() || finished.Before(started) {
		return "-"
	}
	return finished.Sub(started).Round(time.Millisecond).String()
}

// shellQuote quotes s for a POSIX shell, for a command line a person
// copies from a page: a key may hold any character.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

package worker

import (
	"strings"
	"testing"
)

// A connection string is logged as its hosts and database alone: no
// password however it is spelt, no secret of its query.
func TestRedactKeepsHostsAndDatabaseOnly(t *testing.T) {
	for uri, want := range map[string]string{
		"mongodb://ada:s3cr?t@db1:27017,db2:27018/app?replicaSet=rs0":                   "mongodb://db1:27017,db2:27018/app",
		"mongodb://ada:pa%2Fss%40word@db1/app":                                          "mongodb://db1/app",
		"mongodb://db1/app?tlsCertificateKeyFilePassword=hunter2&tls=true":              "mongodb://db1/app",
		"mongodb://ada:x@db1/?authMechanismProperties=AWS_SESSION_TOKEN:tok&w=majority": "mongodb://db1/",
		"mongodb+srv://ada:pw@cluster0.example.net/jobs":                                "mongodb+srv://cluster0.example.net/jobs",
		"mongodb://127.0.0.1:27017/":                                                    "mongodb://127.0.0.1:27017/",
		"http://not-a-mongodb-uri":                                                      "(a connection string that does not parse)",
	} {
		got := redact(uri)
		if got != want {
			t.Errorf("redact(%q) = %q, want %q", uri, got, want)
		}
		for _, secret := range []string{"s3cr", "pa%2F", "hunter2", "tok", ":pw@", "ada"} {
			if strings.Contains(got, secret) {
				t.Errorf("redact(%q) = %q keeps %q", uri, got, secret)
			}
		}
	}
}

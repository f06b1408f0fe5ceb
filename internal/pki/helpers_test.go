package pki

import (
	"crypto/x509/pkix"
	"net/url"
)

func pkixName(ou, cn string) pkix.Name {
	return pkix.Name{CommonName: cn, OrganizationalUnit: []string{ou}}
}

func uris(ss ...string) []*url.URL {
	var out []*url.URL
	for _, s := range ss {
		u, err := url.Parse(s)
		if err != nil {
			panic(err)
		}
		out = append(out, u)
	}
	return out
}

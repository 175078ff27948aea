package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/auditlens/auditlens/ingest"
)

// webhookConfig holds the flags of `auditlens webhook-config`.
type webhookConfig struct {
	url, cluster          string
	apiserver             string
	ca                    string
	clientCert, clientKey string
	token                 string
	embed                 bool
}

func runWebhookConfig(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("webhook-config", "--url URL --cluster NAME [--apiserver NAME] [--ca FILE] [--client-cert FILE --client-key FILE | --token TOKEN] [--embed=false]", stderr)
	var c webhookConfig
	fs.StringVar(&c.url, "url", "", "auditlens's base URL as the kube-apiserver reaches it, e.g. https://auditlens.auditlens.svc:8443 (/audit/NAME is appended)")
	fs.StringVar(&c.cluster, "cluster", "", "cluster name the events are stored under (the URL path /audit/NAME)")
	fs.StringVar(&c.apiserver, "apiserver", "", "name of this kube-apiserver, on a control plane that runs several: each gets its own kubeconfig (the URL path /audit/CLUSTER/NAME)")
	fs.StringVar(&c.ca, "ca", "", "CA certificate (PEM) that signed auditlens's serving certificate; required with an https URL")
	fs.StringVar(&c.clientCert, "client-cert", "", "client certificate (PEM) the apiserver presents (serve --client-ca)")
	fs.StringVar(&c.clientKey, "client-key", "", "private key (PEM) of --client-cert")
	fs.StringVar(&c.token, "token", "", "bearer token the apiserver sends (serve --webhook-token TOKEN=CLUSTER, or TOKEN=CLUSTER/APISERVER for a token per apiserver)")
	fs.BoolVar(&c.embed, "embed", true, "embed the CA, certificate and key as *-data fields; false writes their absolute paths, which must then exist on the apiserver's host")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	spec, warnings, err := c.spec()
	if err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "auditlens webhook-config: warning: %s\n", w)
	}
	_, err = io.WriteString(stdout, renderWebhookKubeconfig(spec))
	return err
}

// spec validates the flags and reads the files they name. Wrong flags are
// errUsage; files that cannot be read or are not what they should be are
// plain errors naming the file.
func (c webhookConfig) spec() (webhookKubeconfigSpec, []string, error) {
	var s webhookKubeconfigSpec
	var warnings []string
	server, err := webhookURL(c.url, c.cluster, c.apiserver)
	if err != nil {
		return s, nil, err
	}
	s.Server = server
	https := strings.HasPrefix(server, "https://")

	if (c.clientCert == "") != (c.clientKey == "") {
		return s, nil, fmt.Errorf("%w: --client-cert and --client-key go together", errUsage)
	}
	if c.clientCert != "" && c.token != "" {
		return s, nil, fmt.Errorf("%w: use either --client-cert/--client-key or --token, not both (serve authenticates the apiserver one way)", errUsage)
	}
	if c.token != "" && strings.ContainsAny(c.token, " \t\r\n") {
		return s, nil, fmt.Errorf("%w: --token must not contain whitespace", errUsage)
	}
	switch {
	case https && c.ca == "":
		return s, nil, fmt.Errorf("%w: --ca is required with an https URL: the CA certificate that signed auditlens's serving certificate (serve --tls-cert)", errUsage)
	case !https && c.ca != "":
		return s, nil, fmt.Errorf("%w: --ca needs an https URL (serve --tls-cert/--tls-key); %s is http", errUsage, c.url)
	case !https && c.clientCert != "":
		return s, nil, fmt.Errorf("%w: --client-cert needs an https URL (serve --tls-cert/--tls-key --client-ca); %s is http", errUsage, c.url)
	case !https && c.token != "":
		warnings = append(warnings, "the token travels in clear text over http; serve with --tls-cert/--tls-key and use an https URL")
	}

	if c.ca != "" {
		pemBytes, err := readPEMCerts(c.ca, "--ca")
		if err != nil {
			return s, nil, err
		}
		if err := setFile(&s.CA, &s.CAData, c.ca, pemBytes, c.embed); err != nil {
			return s, nil, err
		}
	}
	if c.clientCert != "" {
		certPEM, err := readPEMCerts(c.clientCert, "--client-cert")
		if err != nil {
			return s, nil, err
		}
		keyPEM, err := os.ReadFile(c.clientKey)
		if err != nil {
			return s, nil, fmt.Errorf("reading --client-key: %w", err)
		}
		if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
			return s, nil, fmt.Errorf("--client-cert %s and --client-key %s: %w", c.clientCert, c.clientKey, err)
		}
		if err := setFile(&s.ClientCert, &s.ClientCertData, c.clientCert, certPEM, c.embed); err != nil {
			return s, nil, err
		}
		if err := setFile(&s.ClientKey, &s.ClientKeyData, c.clientKey, keyPEM, c.embed); err != nil {
			return s, nil, err
		}
	}
	s.Token = c.token
	return s, warnings, nil
}

// webhookURL checks base and returns the webhook URL for cluster and,
// when set, apiserver: base + /audit/<cluster>[/<apiserver>]. A base
// already ending in /audit, /audit/<cluster> or /audit/<cluster>/<apiserver>
// is completed rather than extended.
func webhookURL(base, cluster, apiserver string) (string, error) {
	if base == "" {
		return "", fmt.Errorf("%w: --url is required: auditlens's base URL as the kube-apiserver reaches it", errUsage)
	}
	if cluster == "" {
		return "", fmt.Errorf("%w: --cluster is required: the name the events are stored under", errUsage)
	}
	if !ingest.ValidName(cluster) {
		return "", fmt.Errorf("%w: --cluster %q must be %s", errUsage, cluster, ingest.NameRule)
	}
	if apiserver != "" && !ingest.ValidName(apiserver) {
		return "", fmt.Errorf("%w: --apiserver %q must be %s", errUsage, apiserver, ingest.NameRule)
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("%w: --url %q: %v", errUsage, base, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%w: --url %q must be http:// or https://", errUsage, base)
	}
	if u.Host == "" {
		return "", fmt.Errorf("%w: --url %q names no host", errUsage, base)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%w: --url %q: want scheme://host[:port][/prefix] without user, query or fragment", errUsage, base)
	}
	want := "/" + cluster
	if apiserver != "" {
		want += "/" + apiserver
	}
	p := strings.TrimRight(u.Path, "/")
	dir, last := path.Split(p)
	parent := path.Base(strings.TrimSuffix(dir, "/"))
	grandparent := path.Base(path.Dir(strings.TrimSuffix(dir, "/")))
	switch {
	case last == "audit":
		p += want
	case parent == "audit": // /audit/<cluster>
		if last != cluster {
			return "", fmt.Errorf("%w: --url %q names cluster %q but --cluster is %q", errUsage, base, last, cluster)
		}
		if apiserver != "" {
			p += "/" + apiserver
		}
	case grandparent == "audit": // /audit/<cluster>/<apiserver>
		if parent != cluster {
			return "", fmt.Errorf("%w: --url %q names cluster %q but --cluster is %q", errUsage, base, parent, cluster)
		}
		if last != apiserver {
			return "", fmt.Errorf("%w: --url %q names apiserver %q but --apiserver is %q", errUsage, base, last, apiserver)
		}
	default:
		p += "/audit" + want
	}
	u.Path, u.RawPath = p, ""
	return u.String(), nil
}

// readPEMCerts reads a file that must hold PEM certificates, all parseable.
func readPEMCerts(file, flagName string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", flagName, err)
	}
	n := 0
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s %s: holds a PEM %q block, want CERTIFICATE", flagName, file, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return nil, fmt.Errorf("%s %s: certificate %d: %w", flagName, file, n+1, err)
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%s %s holds no PEM certificate", flagName, file)
	}
	return b, nil
}

// setFile sets the embedded contents or, without embed, the absolute path
// (a relative path in a kubeconfig is taken relative to the kubeconfig's
// own directory, which is rarely what was meant).
func setFile(pathField *string, dataField *[]byte, file string, contents []byte, embed bool) error {
	if embed {
		*dataField = contents
		return nil
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return fmt.Errorf("resolving %s: %w", file, err)
	}
	*pathField = abs
	return nil
}

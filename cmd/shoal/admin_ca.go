package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/internal/wire"
)

// newCACmd is `shoal admin ca init`.
func newCACmd() *cobra.Command {
	ca := &cobra.Command{Use: "ca", Short: "Manage the cluster certificate authority (docs/security.md)"}
	var dir, name string
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Create a cluster CA in --dir (ca.crt, ca.key with mode 0600)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := pki.InitCA(dir, name, 0)
			if err != nil {
				return err
			}
			fmt.Printf("CA %q created in %s (valid until %s); keep %s secret\n", c.Cert.Subject.CommonName, dir,
				c.Cert.NotAfter.Format("2006-01-02"), filepath.Join(dir, pki.CAKeyFile))
			return nil
		},
	}
	initCmd.Flags().StringVar(&dir, "dir", "", "directory for the CA (required)")
	initCmd.Flags().StringVar(&name, "name", "shoal cluster CA", "the CA's common name")
	initCmd.MarkFlagRequired("dir")
	ca.AddCommand(initCmd)
	return ca
}

// newCertCmd is `shoal admin cert issue`.
func newCertCmd() *cobra.Command {
	cert := &cobra.Command{Use: "cert", Short: "Issue certificates from the cluster CA"}
	var role, caDir, out, hosts string
	var days int
	issue := &cobra.Command{
		Use:   "issue NAME",
		Short: "Issue a certificate for NAME with --role mds|ost|client|admin into --out (NAME.crt, NAME.key, ca.crt)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := pki.ParseRole(role)
			if err != nil {
				return fmt.Errorf("--role: %w", err)
			}
			c, err := pki.LoadCA(caDir)
			if err != nil {
				return err
			}
			var hs []string
			for _, h := range strings.Split(hosts, ",") {
				if h = strings.TrimSpace(h); h != "" {
					hs = append(hs, h)
				}
			}
			if (r == pki.RoleMDS || r == pki.RoleOST) && len(hs) == 0 {
				return fmt.Errorf("a %s certificate needs --host: the names or addresses clients reach it at", r)
			}
			p, err := c.IssueTo(out, pki.Request{Role: r, Name: args[0], Hosts: hs, Validity: time.Duration(days) * 24 * time.Hour})
			if err != nil {
				return err
			}
			fmt.Printf("issued %s certificate %q: %s, %s (mode 0600), %s\n", r, args[0], p.Cert, p.Key, p.CA)
			return nil
		},
	}
	issue.Flags().StringVar(&role, "role", "", "mds, ost, client or admin (required)")
	issue.Flags().StringVar(&caDir, "ca", "", "directory of the CA (shoal admin ca init --dir)")
	issue.Flags().StringVar(&out, "out", ".", "directory to write NAME.crt, NAME.key and ca.crt to")
	issue.Flags().StringVar(&hosts, "host", "", "comma-separated DNS names and IP addresses the holder serves on (servers)")
	issue.Flags().IntVar(&days, "days", 365, "validity in days")
	issue.MarkFlagRequired("role")
	issue.MarkFlagRequired("ca")
	cert.AddCommand(issue)
	return cert
}

// tlsFlags are the transport security flags of every command that talks
// to or serves a cluster.
type tlsFlags struct {
	cert, key, ca string
	insecure      bool
	flags         *pflag.FlagSet // where they are defined: which were given (explicit)
}

func addTLSFlags(cmd *cobra.Command, f *tlsFlags) {
	cmd.Flags().StringVar(&f.cert, "cert", os.Getenv("SHOAL_CERT"), "this node's certificate, PEM (default $SHOAL_CERT)")
	cmd.Flags().StringVar(&f.key, "key", os.Getenv("SHOAL_KEY"), "this node's private key, PEM (default $SHOAL_KEY)")
	cmd.Flags().StringVar(&f.ca, "ca", os.Getenv("SHOAL_CA"), "the cluster CA's certificate, PEM (default $SHOAL_CA)")
	cmd.Flags().BoolVar(&f.insecure, "insecure", os.Getenv("SHOAL_INSECURE") == "1", "plaintext, no certificates: only for a trusted network or loopback (default $SHOAL_INSECURE=1); given as a flag (or in a config file), it overrides certificates that come from the environment, as --cert, --key and --ca override $SHOAL_INSECURE")
	f.flags = cmd.Flags()
}

// load returns the credentials (nil with --insecure), refusing to run
// without either.
func (f *tlsFlags) load() (*wire.Creds, error) {
	files := wire.TLSFiles{Cert: f.cert, Key: f.key, CA: f.ca}
	insecure, files, err := tlsPrecedence(f.insecure, files, func(name string) bool {
		fl := f.flags.Lookup(name)
		return fl != nil && fl.Changed
	})
	if err != nil {
		return nil, err
	}
	if insecure {
		return nil, nil
	}
	if files.IsZero() {
		return nil, fmt.Errorf("no certificate: pass --cert, --key and --ca (shoal admin cert issue; docs/security.md), or --insecure for plaintext")
	}
	return wire.LoadCreds(files)
}

// tlsPrecedence settles --insecure against certificate files: a value
// given explicitly (a flag, or a config file's key; given reports which)
// wins over one from the environment, so that --insecure ignores
// $SHOAL_CERT, $SHOAL_KEY and $SHOAL_CA, and --cert/--key/--ca ignore
// $SHOAL_INSECURE. Both given the same way is an error.
func tlsPrecedence(insecure bool, files wire.TLSFiles, given func(name string) bool) (bool, wire.TLSFiles, error) {
	if !insecure || files.IsZero() {
		return insecure, files, nil
	}
	certsGiven := given("cert") || given("key") || given("ca")
	switch {
	case given("insecure") && !certsGiven:
		return true, wire.TLSFiles{}, nil
	case !given("insecure") && certsGiven:
		return false, files, nil
	case !given("insecure"):
		return false, files, fmt.Errorf("$SHOAL_INSECURE=1 with $SHOAL_CERT, $SHOAL_KEY or $SHOAL_CA: choose one (or pass --insecure, or --cert, --key and --ca)")
	}
	return false, files, fmt.Errorf("--insecure with --cert/--key/--ca: choose one")
}

// reloadOnHUP reloads c's files on every SIGHUP until stop is closed.
func reloadOnHUP(c *wire.Creds, logf func(msg string, args ...any), stop <-chan struct{}) {
	if c == nil {
		return
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-stop:
				return
			case <-ch:
				if err := c.Reload(); err != nil {
					logf("certificate reload failed; keeping the old one", "err", err)
				} else {
					logf("certificates reloaded", "cert", c.Files().Cert)
				}
			}
		}
	}()
}

// addPersistentTLSFlags is addTLSFlags for a command and its subcommands.
func addPersistentTLSFlags(cmd *cobra.Command, f *tlsFlags) {
	tmp := &cobra.Command{}
	addTLSFlags(tmp, f)
	cmd.PersistentFlags().AddFlagSet(tmp.Flags())
}

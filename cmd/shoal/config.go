package main

// Config files of the daemons (shoal mds, ost, mount; docs/deploy.md).
//
// A config file is YAML: a mapping whose keys are the command's long flag
// names and whose values are what the flag would take (a list for a flag
// that takes several values):
//
//	dir: /var/lib/shoal/mds
//	listen: 10.0.0.1:7700
//	squash: ["*"]
//
// Precedence, highest first: flags on the command line, the config file,
// the environment ($SHOAL_MDS, $SHOAL_CERT, ...), built-in defaults.
// --print-config prints the effective configuration in the same format and
// exits; the output is a valid config file. Every value is then validated,
// and all problems are reported together.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/shoalfs/shoal/internal/wire"
)

// configCheck returns the problems of cmd's effective configuration, each
// naming its key; args are the command's positional arguments.
type configCheck func(cmd *cobra.Command, args []string) []string

// notConfig are flags a config file does not set.
var notConfig = []string{"config", "print-config", "help"}

// configurable adds --config and --print-config to cmd, and wraps its RunE
// so that it runs with the file applied and the result validated.
func configurable(cmd *cobra.Command, checks ...configCheck) *cobra.Command {
	var file string
	var print bool
	cmd.Flags().StringVar(&file, "config", "", "YAML config file: keys are flag names; flags given on the command line override it")
	cmd.Flags().BoolVar(&print, "print-config", false, "print the effective configuration as YAML, check it, and exit")
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if file != "" {
			if err := applyConfig(cmd, file); err != nil {
				return err
			}
		}
		var problems []string
		for _, c := range checks {
			problems = append(problems, c(cmd, args)...)
		}
		if print {
			if err := printConfig(cmd.OutOrStdout(), cmd); err != nil {
				return err
			}
		}
		if len(problems) > 0 {
			return fmt.Errorf("invalid configuration of shoal %s:\n  %s", cmd.Name(), strings.Join(problems, "\n  "))
		}
		if print {
			return nil
		}
		return run(cmd, args)
	}
	return cmd
}

// applyConfig sets the flags of cmd not given on the command line from
// the YAML file at path.
func applyConfig(cmd *cobra.Command, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil // empty file
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return fmt.Errorf("config %s:%d: want a mapping of flag names to values", path, m.Line)
	}
	fs := cmd.Flags()
	var problems []string
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		at := fmt.Sprintf("%s:%d", path, k.Line)
		name := k.Value
		f := fs.Lookup(name)
		switch {
		case seen[name]:
			problems = append(problems, fmt.Sprintf("%s: %s: given twice", at, name))
			continue
		case f == nil || slices.Contains(notConfig, name):
			msg := fmt.Sprintf("%s: unknown key %q", at, name)
			if s := closestFlag(cmd, name); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			problems = append(problems, msg)
			continue
		}
		seen[name] = true
		if f.Changed {
			continue // the command line wins
		}
		var val string
		switch v.Kind {
		case yaml.ScalarNode:
			val = v.Value
		case yaml.SequenceNode:
			if !strings.HasSuffix(f.Value.Type(), "Slice") && !strings.HasSuffix(f.Value.Type(), "Array") {
				problems = append(problems, fmt.Sprintf("%s: %s takes one value, not a list", at, name))
				continue
			}
			var items []string
			for _, e := range v.Content {
				if e.Kind != yaml.ScalarNode {
					problems = append(problems, fmt.Sprintf("%s: %s: list items must be plain values", at, name))
					continue
				}
				items = append(items, e.Value)
			}
			val = strings.Join(items, ",")
		default:
			problems = append(problems, fmt.Sprintf("%s: %s: want a value or a list of values", at, name))
			continue
		}
		if err := fs.Set(name, val); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %s: %v", at, name, err))
		}
	}
	if len(problems) > 0 {
		return errors.New("config " + path + ":\n  " + strings.Join(problems, "\n  "))
	}
	return nil
}

// closestFlag returns the flag of cmd nearest to name, if one is close.
func closestFlag(cmd *cobra.Command, name string) string {
	best, bestD := "", 3
	for _, n := range configKeys(cmd) {
		if d := editDistance(name, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func configKeys(cmd *cobra.Command) []string {
	var keys []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !slices.Contains(notConfig, f.Name) && !f.Hidden {
			keys = append(keys, f.Name)
		}
	})
	sort.Strings(keys)
	return keys
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// printConfig writes the effective value of every key of cmd as YAML,
// each with its flag's help as a comment.
func printConfig(w io.Writer, cmd *cobra.Command) error {
	m := &yaml.Node{Kind: yaml.MappingNode}
	fs := cmd.Flags()
	for _, name := range configKeys(cmd) {
		f := fs.Lookup(name)
		k := &yaml.Node{Kind: yaml.ScalarNode, Value: name, HeadComment: f.Usage}
		var v *yaml.Node
		switch t := f.Value.Type(); {
		case t == "bool":
			v = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: f.Value.String()}
		case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
			v = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: f.Value.String()}
		case strings.HasSuffix(t, "Slice") || strings.HasSuffix(t, "Array"):
			v = &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
			if sv, ok := f.Value.(interface{ GetSlice() []string }); ok {
				for _, s := range sv.GetSlice() {
					v.Content = append(v.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s})
				}
			}
		default:
			v = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: f.Value.String()}
		}
		m.Content = append(m.Content, k, v)
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{m},
		HeadComment: fmt.Sprintf("shoal %s: effective configuration (shoal %s --config FILE)", cmd.Name(), cmd.Name())}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	return enc.Close()
}

// Checks shared by the daemons.

// required reports the keys that are empty.
func required(names ...string) configCheck {
	return func(cmd *cobra.Command, _ []string) []string {
		var p []string
		for _, n := range names {
			if f := cmd.Flags().Lookup(n); f != nil && strings.TrimSpace(f.Value.String()) == "" {
				p = append(p, fmt.Sprintf("%s: required (--%s or %q in the config file)", n, n, n))
			}
		}
		return p
	}
}

// hostPorts reports the keys that are neither empty nor HOST:PORT; the
// values in also are accepted as they are.
func hostPorts(also []string, names ...string) configCheck {
	return func(cmd *cobra.Command, _ []string) []string {
		var p []string
		for _, n := range names {
			f := cmd.Flags().Lookup(n)
			if f == nil {
				continue
			}
			v := f.Value.String()
			if v == "" || slices.Contains(also, v) {
				continue
			}
			if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
				p = append(p, fmt.Sprintf("%s: %q is not HOST:PORT", n, v))
			}
		}
		return p
	}
}

// mdsAddrs checks the MDS address list of --mds (one address, or a
// group's comma-separated list); an address without a port has the MDS's
// default port (wire.DefaultMDSPort).
func mdsAddrs(cmd *cobra.Command, _ []string) []string {
	v := flagString(cmd, "mds")
	if strings.TrimSpace(v) == "" {
		return []string{"mds: required: the MDS address, or the group's addresses comma-separated (--mds, \"mds\" in the config file, or $SHOAL_MDS)"}
	}
	var p []string
	for _, a := range strings.Split(v, ",") {
		if strings.TrimSpace(a) == "" {
			p = append(p, fmt.Sprintf("mds: an empty address in %q", v))
		}
	}
	return p
}

// tlsConfig checks the certificate keys: --insecure, or all of cert, key
// and ca naming readable files (an explicit key wins over the environment:
// tlsPrecedence).
func tlsConfig(cmd *cobra.Command, _ []string) []string {
	insecure := flagString(cmd, "insecure") == "true"
	tf := wire.TLSFiles{Cert: flagString(cmd, "cert"), Key: flagString(cmd, "key"), CA: flagString(cmd, "ca")}
	if i, f, err := tlsPrecedence(insecure, tf, cmd.Flags().Changed); err == nil {
		insecure, tf = i, f // one side given explicitly wins over the environment
	}
	files := map[string]string{"cert": tf.Cert, "key": tf.Key, "ca": tf.CA}
	var set []string
	for _, n := range []string{"cert", "key", "ca"} {
		if files[n] != "" {
			set = append(set, n)
		}
	}
	switch {
	case insecure && len(set) > 0:
		return []string{fmt.Sprintf("insecure: plaintext was asked for, but %s name certificate files: choose one", strings.Join(set, ", "))}
	case insecure:
		return nil
	case len(set) == 0:
		return []string{"cert, key, ca: required unless insecure is true (shoal admin cert issue; docs/security.md)"}
	}
	var p []string
	for _, n := range []string{"cert", "key", "ca"} {
		if files[n] == "" {
			p = append(p, fmt.Sprintf("%s: required with %s", n, strings.Join(set, " and ")))
		} else if _, err := os.Stat(files[n]); err != nil {
			p = append(p, fmt.Sprintf("%s: %v", n, err))
		}
	}
	return p
}

// logLevel checks --log-level.
func logLevel(cmd *cobra.Command, _ []string) []string {
	switch v := flagString(cmd, "log-level"); v {
	case "debug", "info", "warn", "error", "DEBUG", "INFO", "WARN", "ERROR":
		return nil
	default:
		return []string{fmt.Sprintf("log-level: %q is none of debug, info, warn, error", v)}
	}
}

// logFormat checks --log-format.
func logFormat(cmd *cobra.Command, _ []string) []string {
	switch v := flagString(cmd, "log-format"); v {
	case "text", "json", "TEXT", "JSON":
		return nil
	default:
		return []string{fmt.Sprintf("log-format: %q is neither text nor json", v)}
	}
}

func flagString(cmd *cobra.Command, name string) string {
	if f := cmd.Flags().Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// The checks of each daemon.

func mdsChecks() []configCheck {
	return []configCheck{required("dir"), hostPorts(nil, "listen", "metrics"), tlsConfig, logLevel, logFormat,
		func(cmd *cobra.Command, _ []string) []string {
			peers, id := flagString(cmd, "peers"), flagString(cmd, "id")
			if peers == "" {
				return nil
			}
			p, err := parsePeers(peers)
			switch {
			case err != nil:
				return []string{"peers: " + strings.TrimPrefix(err.Error(), "--peers: ")}
			case id == "0":
				return []string{"id: required with peers: this member's id"}
			}
			if flagString(cmd, "join") != "true" {
				for k := range p {
					if fmt.Sprint(k) == id {
						return nil
					}
				}
				return []string{fmt.Sprintf("id: %s is not among the peers (%s)", id, peers)}
			}
			return nil
		}}
}

func ostChecks() []configCheck {
	return []configCheck{required("dir"), mdsAddrs, hostPorts([]string{"off"}, "listen", "advertise", "data-listen", "metrics"), tlsConfig, logLevel, logFormat}
}

func mountChecks() []configCheck {
	return []configCheck{mdsAddrs, hostPorts(nil, "metrics"), tlsConfig, logLevel, logFormat,
		func(cmd *cobra.Command, args []string) []string {
			mp := flagString(cmd, "mountpoint")
			if len(args) > 0 {
				mp = args[0]
			}
			if mp == "" {
				return []string{"mountpoint: required (the MOUNTPOINT argument, --mountpoint, or \"mountpoint\" in the config file)"}
			}
			if fi, err := os.Stat(mp); err != nil {
				return []string{"mountpoint: " + err.Error()}
			} else if !fi.IsDir() {
				return []string{fmt.Sprintf("mountpoint: %s is not a directory", mp)}
			}
			return nil
		}}
}

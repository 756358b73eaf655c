// Command certgen writes the CAs and certificates test/e2e/security.sh
// needs into one directory, made fresh at every run (none is committed):
//
//	ca.pem                        the CA the gateway trusts (server and clients)
//	server.pem, server.key        127.0.0.1, ::1, localhost, signed by ca.pem
//	<cn>.pem, <cn>.key            a client certificate of ca.pem per -client name
//	expired.pem, expired.key      CN -expired-cn, signed by ca.pem, expired an hour ago
//	otherca.pem                   a second CA the gateway does not trust
//	foreign.pem, foreign.key      CN -foreign-cn, signed by otherca.pem
//
//	go run ./test/internal/certgen/cmd/certgen -dir DIR -client alice,ops -expired-cn alice -foreign-cn alice
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tolsey/tolsey/test/internal/certgen"
)

func main() {
	dir := flag.String("dir", "", "directory to write into (must exist)")
	clients := flag.String("client", "", "client certificate CNs, comma-separated")
	expiredCN := flag.String("expired-cn", "", "CN of the expired client certificate (none if empty)")
	foreignCN := flag.String("foreign-cn", "", "CN of the client certificate from the untrusted CA (none if empty)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "certgen: -dir is required")
		os.Exit(2)
	}
	if err := run(*dir, *clients, *expiredCN, *foreignCN); err != nil {
		fmt.Fprintln(os.Stderr, "certgen:", err)
		os.Exit(1)
	}
}

func run(dir, clients, expiredCN, foreignCN string) error {
	path := func(name string) string { return filepath.Join(dir, name) }
	ca, err := certgen.NewCA("tolsey e2e CA")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path("ca.pem"), ca.PEM, 0o644); err != nil {
		return err
	}
	srv, err := ca.Server()
	if err != nil {
		return err
	}
	if err := srv.Write(path("server.pem"), path("server.key")); err != nil {
		return err
	}
	for _, cn := range strings.Split(clients, ",") {
		if cn = strings.TrimSpace(cn); cn == "" {
			continue
		}
		c, err := ca.Client(cn, certgen.Current())
		if err == nil {
			err = c.Write(path(cn+".pem"), path(cn+".key"))
		}
		if err != nil {
			return fmt.Errorf("client %s: %w", cn, err)
		}
	}
	if expiredCN != "" {
		c, err := ca.Client(expiredCN, certgen.Expired())
		if err == nil {
			err = c.Write(path("expired.pem"), path("expired.key"))
		}
		if err != nil {
			return fmt.Errorf("expired: %w", err)
		}
	}
	if foreignCN != "" {
		other, err := certgen.NewCA("another CA")
		if err != nil {
			return err
		}
		if err := os.WriteFile(path("otherca.pem"), other.PEM, 0o644); err != nil {
			return err
		}
		c, err := other.Client(foreignCN, certgen.Current())
		if err == nil {
			err = c.Write(path("foreign.pem"), path("foreign.key"))
		}
		if err != nil {
			return fmt.Errorf("foreign: %w", err)
		}
	}
	return nil
}

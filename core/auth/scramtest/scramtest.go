// Package scramtest is the client side of SCRAM-SHA-256 (RFC 5802 §3,
// RFC 7677), written from the RFC, for tests of the server side (core/auth)
// and of the front-ends that carry it (AMQP SASL): go-amqp has no SCRAM.
// Production code must not import it.
package scramtest

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Client is one SCRAM-SHA-256 exchange as a client runs it. Nonce is the
// client nonce (fixed in tests, so that runs repeat).
type Client struct {
	User, Password, Nonce string

	first, authMessage string
	serverKey          []byte
}

// First is the client-first message (no channel binding).
func (c *Client) First() string {
	c.first = "n=" + strings.NewReplacer("=", "=3D", ",", "=2C").Replace(c.User) + ",r=" + c.Nonce
	return "n,," + c.first
}

// Final is the client-final message answering serverFirst, with the proof.
func (c *Client) Final(serverFirst string) (string, error) {
	var nonce, salt string
	iter := 0
	for _, a := range strings.Split(serverFirst, ",") {
		switch {
		case strings.HasPrefix(a, "r="):
			nonce = a[2:]
		case strings.HasPrefix(a, "s="):
			salt = a[2:]
		case strings.HasPrefix(a, "i="):
			fmt.Sscan(a[2:], &iter)
		}
	}
	if !strings.HasPrefix(nonce, c.Nonce) {
		return "", errors.New("server nonce does not extend ours")
	}
	rawSalt, err := base64.StdEncoding.DecodeString(salt)
	if err != nil {
		return "", err
	}
	salted, err := pbkdf2.Key(sha256.New, c.Password, rawSalt, iter, 32)
	if err != nil {
		return "", err
	}
	clientKey := hmacSHA256(salted, "Client Key")
	stored := sha256.Sum256(clientKey)
	withoutProof := "c=biws,r=" + nonce
	c.authMessage = c.first + "," + serverFirst + "," + withoutProof
	sig := hmacSHA256(stored[:], c.authMessage)
	for i := range clientKey {
		clientKey[i] ^= sig[i]
	}
	c.serverKey = hmacSHA256(salted, "Server Key")
	return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(clientKey), nil
}

// ServerFinal is the server-final message a server that knows the password
// sends: "v=" and its signature.
func (c *Client) ServerFinal() string {
	return "v=" + base64.StdEncoding.EncodeToString(hmacSHA256(c.serverKey, c.authMessage))
}

// Verify reports whether serverFinal proves the server knows the password.
func (c *Client) Verify(serverFinal string) bool {
	return hmac.Equal([]byte(serverFinal), []byte(c.ServerFinal()))
}

func hmacSHA256(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}

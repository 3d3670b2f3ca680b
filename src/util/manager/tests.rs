//! Tests for the object managers against a fake API server on 127.0.0.1.

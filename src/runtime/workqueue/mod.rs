//! A deduplicating, delaying, rate-limited work queue of keys (client-go's guarantees).

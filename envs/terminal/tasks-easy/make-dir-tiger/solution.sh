mkdir tiger

echo canyon

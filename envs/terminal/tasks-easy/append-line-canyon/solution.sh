echo canyon >> notes.txt

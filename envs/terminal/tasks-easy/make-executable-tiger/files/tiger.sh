echo tiger

mkdir harbor

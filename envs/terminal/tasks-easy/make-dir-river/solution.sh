mkdir river

echo river
